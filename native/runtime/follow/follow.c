/* libsigmatrace_follow.so: lets `sigmatrace spawn` trace every program its target starts.
 *
 * The controller starts the target with this library in LD_PRELOAD and SIGMATRACE_FOLLOW set
 * to a unix socket of its own (in a 0700 directory).  Every dynamically linked program that
 * the target, or any of its descendants, starts with exec inherits both, so this constructor
 * runs in it before main: it says hello (its pid) and waits until the controller has attached
 * and installed the agent, then lets the program go on.
 *
 * Unlike Frida's child gating this survives launchers that close every descriptor before exec
 * (Python's subprocess, torchrun): nothing is inherited but the environment.  Fail inert: no
 * controller (gone, refused, silent past the timeout) means the program simply runs on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

__attribute__((constructor)) static void sigmatrace_follow(void)
{
    const char *path = getenv("SIGMATRACE_FOLLOW");
    if (!path || !*path || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return;
    int saved_errno = errno;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto out;
    struct sockaddr_un a;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    strcpy(a.sun_path, path);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto done;
    const char *t = getenv("SIGMATRACE_FOLLOW_TIMEOUT");
    struct timeval tv = {.tv_sec = t ? atoi(t) : 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char msg[64];
    int n = snprintf(msg, sizeof(msg), "hello %d\n", (int)getpid());
    if (write(fd, msg, (size_t)n) != n)
        goto done;
    /* any answer, EOF, error or timeout lets the program go on */
    char buf[16];
    while (read(fd, buf, sizeof(buf)) < 0 && errno == EINTR)
        ;
done:
    close(fd);
out:
    errno = saved_errno;
}
