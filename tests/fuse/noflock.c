/* A pass-through FUSE filesystem whose flock(2) fails with ENOLCK, as NFS without a lock manager or Lustre mounted
 * without `flock` do: the test of hvdflow's lock on a filesystem that refuses flock mounts it.
 *
 * Usage: noflock BACKING_DIR MOUNTPOINT [fuse options]   (e.g. -f to stay in the foreground)
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char backing[PATH_MAX];

static void real(char out[PATH_MAX], const char *path) { snprintf(out, PATH_MAX, "%s%s", backing, path); }

static int nf_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    char p[PATH_MAX]; (void)fi; real(p, path);
    return lstat(p, st) == -1 ? -errno : 0;
}

static int nf_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
    char p[PATH_MAX]; (void)off; (void)fi; (void)flags; real(p, path);
    DIR *d = opendir(p);
    if (!d) return -errno;
    for (struct dirent *e; (e = readdir(d));) fill(buf, e->d_name, NULL, 0, 0);
    closedir(d);
    return 0;
}

static int nf_open(const char *path, struct fuse_file_info *fi) {
    char p[PATH_MAX]; real(p, path);
    int fd = open(p, fi->flags);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int nf_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    char p[PATH_MAX]; real(p, path);
    int fd = open(p, fi->flags, mode);
    if (fd == -1) return -errno;
    fi->fh = fd;
    return 0;
}

static int nf_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path; ssize_t n = pread(fi->fh, buf, size, off);
    return n == -1 ? -errno : (int)n;
}

static int nf_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)path; ssize_t n = pwrite(fi->fh, buf, size, off);
    return n == -1 ? -errno : (int)n;
}

static int nf_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    char p[PATH_MAX]; real(p, path);
    return (fi ? ftruncate(fi->fh, size) : truncate(p, size)) == -1 ? -errno : 0;
}

static int nf_release(const char *path, struct fuse_file_info *fi) { (void)path; close(fi->fh); return 0; }

static int nf_unlink(const char *path) { char p[PATH_MAX]; real(p, path); return unlink(p) == -1 ? -errno : 0; }

static int nf_mkdir(const char *path, mode_t mode) {
    char p[PATH_MAX]; real(p, path);
    return mkdir(p, mode) == -1 ? -errno : 0;
}

static int nf_rmdir(const char *path) { char p[PATH_MAX]; real(p, path); return rmdir(p) == -1 ? -errno : 0; }

static int nf_rename(const char *from, const char *to, unsigned int flags) {
    char a[PATH_MAX], b[PATH_MAX];
    if (flags) return -EINVAL;
    real(a, from); real(b, to);
    return rename(a, b) == -1 ? -errno : 0;
}

static int nf_flock(const char *path, struct fuse_file_info *fi, int op) { (void)path; (void)fi; (void)op; return -ENOLCK; }

static const struct fuse_operations ops = {
    .getattr = nf_getattr, .readdir = nf_readdir, .open = nf_open, .create = nf_create, .read = nf_read,
    .write = nf_write, .truncate = nf_truncate, .release = nf_release, .unlink = nf_unlink, .mkdir = nf_mkdir,
    .rmdir = nf_rmdir, .rename = nf_rename, .flock = nf_flock,
};

int main(int argc, char *argv[]) {
    if (argc < 3 || !realpath(argv[1], backing)) {
        fprintf(stderr, "usage: noflock BACKING_DIR MOUNTPOINT [fuse options]\n");
        return 2;
    }
    argv[1] = argv[0];
    return fuse_main(argc - 1, argv + 1, &ops, NULL);
}
