/* exit() from a signal handler that interrupts ibv_poll_cq, as libinfinipath's handler (loaded
 * by libfabric) does on SIGTERM: a thread polling an empty CQ may be inside an engine pass (the
 * polling assist) when the signal comes, holding the engine lock.  The process must still end,
 * with the status exit() was given.
 *
 *     exit_in_poll [ROUNDS]   forks ROUNDS children (default 20); each polls an empty CQ until
 *                             a SIGALRM 20-40 ms later calls exit(3).  Prints "children exited
 *                             3: N" and exits 0 when all did within 5 s each.
 */
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void on_alarm(int sig)
{
    (void)sig;
    exit(3);
}

static int child(int round)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = list && n ? ibv_open_device(list[0]) : NULL;
    struct ibv_cq *cq = ctx ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
    struct ibv_wc wc;
    struct itimerval t = {.it_value = {.tv_usec = 20000 + 1000 * (round % 20)}};

    if (!cq) {
        perror("setup");
        return 1;
    }
    signal(SIGALRM, on_alarm);
    setitimer(ITIMER_REAL, &t, NULL);
    for (;;)
        if (ibv_poll_cq(cq, 1, &wc) != 0)
            return 1;   /* nothing was posted: no completion may appear */
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20, ok = 0;

    for (int i = 0; i < rounds; i++) {
        int status = 0;
        pid_t pid;

        fflush(stdout);     /* the child's exit() flushes what it inherited */
        pid = fork();

        if (pid == 0)
            _exit(child(i));
        for (int w = 0; w < 500 && waitpid(pid, &status, WNOHANG) == 0; w++)
            usleep(10000);
        if (waitpid(pid, &status, WNOHANG) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            printf("child %d did not end\n", i);
            continue;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
            ok++;
        else
            printf("child %d ended with status 0x%x\n", i, status);
    }
    printf("children exited 3: %d\n", ok);
    return ok == rounds ? 0 : 1;
}
