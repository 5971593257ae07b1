/* The session's trace directory and its streams/, held open for the session so that every file
 * of ours is created inside them by openat: never through a symbolic link (at the directories
 * or at the file), never into a file that existed before (O_EXCL), never inherited by a program
 * the target execs (O_CLOEXEC).  Nothing here changes the mode of anything. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"

static int st_dir = -1, st_streams = -1;

int st_dir_fd(void) { return st_dir; }
int st_streams_fd(void) { return st_streams; }

/* Parents of `dir` are made as needed (they are the user's --out, the controller's business);
 * `dir` itself must not be a link. */
static int st_mkdir_parents(const char *dir)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return 0;
}

/* A directory of ours at `name` under `at`: made (0700) if missing, opened without following a
 * link there, and owned by us (else someone else can read or replace what we write). */
static int st_own_dir(int at, const char *name, const char *shown)
{
    if (mkdirat(at, name, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        st_error("init", "cannot create %s: %s", shown, strerror(e));
        return -e;
    }
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        st_error("init", "%s is not a directory of ours (%s): a symbolic link is not followed", shown,
                 e == ELOOP || e == ENOTDIR ? "a symbolic link or a file" : strerror(e));
        return -(e == ELOOP ? ENOTDIR : e);
    }
    struct stat s;
    if (fstat(fd, &s) != 0 || s.st_uid != geteuid()) {
        st_error("init", "%s belongs to another user: nothing is written there", shown);
        close(fd);
        return -EPERM;
    }
    return fd;
}

int st_dirs_open(const char *dir)
{
    st_dirs_close();
    if (st_mkdir_parents(dir) != 0) {
        int e = errno;
        st_error("init", "cannot create the parents of %s: %s", dir, strerror(e));
        return -e;
    }
    int d = st_own_dir(AT_FDCWD, dir, dir);
    if (d < 0)
        return d;
    char shown[4200];
    snprintf(shown, sizeof(shown), "%s/streams", dir);
    int s = st_own_dir(d, "streams", shown);
    if (s < 0) {
        close(d);
        return s;
    }
    st_dir = d;
    st_streams = s;
    return 0;
}

void st_dirs_close(void)
{
    if (st_streams >= 0)
        close(st_streams);
    if (st_dir >= 0)
        close(st_dir);
    st_dir = st_streams = -1;
}

int st_create_file(int dirfd, const char *name, int flags)
{
    int fd = openat(dirfd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        struct stat s;
        if (fstatat(dirfd, name, &s, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(s.st_mode))
            st_error("files", "%s exists and is %s, not a file of ours: not followed, not written", name,
                     S_ISLNK(s.st_mode) ? "a symbolic link" : "something else");
        errno = EEXIST;
    }
    return fd;
}
