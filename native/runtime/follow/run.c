/* sigmatrace-run: the parent of the program `sigmatrace spawn` starts.
 *
 * Frida ptrace-attaches to the program to inject its agent; when the tracer's process is also the
 * program's parent, Frida's own waitpid can reap the program and its exit status is lost (the
 * controller's wait then fails with ECHILD).  With this small process as the parent, the tracer
 * only ever consumes ptrace notifications and the real status reaches us, and we pass it on: our
 * exit status is the program's, and a program killed by a signal kills us with that signal.
 *
 *   SIGMATRACE_RUN_PRELOAD=lib SIGMATRACE_RUN_FOLLOW=sock sigmatrace-run PROGRAM ARGS...
 * The program gets LD_PRELOAD (lib first) and SIGMATRACE_FOLLOW; this process runs without them.
 * SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed to the program; SIGINT is not (a
 * terminal's Ctrl-C reaches the program itself). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile pid_t child;

static void forward(int sig)
{
    if (child > 0)
        kill(child, sig);
}

static void set_child_env(void)
{
    const char *pre = getenv("SIGMATRACE_RUN_PRELOAD");
    const char *sock = getenv("SIGMATRACE_RUN_FOLLOW");
    if (pre && *pre) {
        const char *old = getenv("LD_PRELOAD");
        size_t n = strlen(pre) + (old ? strlen(old) : 0) + 2;
        char *v = malloc(n);
        if (v) {
            snprintf(v, n, "%s%s%s", pre, old && *old ? " " : "", old && *old ? old : "");
            setenv("LD_PRELOAD", v, 1);
        }
    }
    if (sock && *sock)
        setenv("SIGMATRACE_FOLLOW", sock, 1);
    unsetenv("SIGMATRACE_RUN_PRELOAD");
    unsetenv("SIGMATRACE_RUN_FOLLOW");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sigmatrace-run PROGRAM [ARGS...]\n");
        return 2;
    }
    static const int passed[] = {SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* block them until the child exists, so none is lost or acted on by default */
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
        sigaddset(&block, passed[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t pid = fork();
    if (pid < 0) {
        perror("sigmatrace-run: fork");
        return 127;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        set_child_env();
        execvp(argv[1], argv + 1);
        fprintf(stderr, "sigmatrace-run: cannot run %s: %s\n", argv[1], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    child = pid;
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
        sigaction(passed[i], &sa, NULL);
    signal(SIGINT, SIG_IGN);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("sigmatrace-run: waitpid");
            return 127;
        }
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
    }
    return 128;
}
