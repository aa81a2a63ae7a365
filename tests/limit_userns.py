"""``python3 limit_userns.py N COMMAND...``: COMMAND in a new user namespace (this user's uid and gid mapped to
themselves) whose ``user.max_user_namespaces`` is N. N = 0 makes the kernel refuse every further user namespace
(ENOSPC), as a site's sysctl does: a real refusal for the tests, made without root."""

import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000

if __name__ == "__main__":
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER) != 0:
        sys.exit("unshare(CLONE_NEWUSER): %s" % os.strerror(ctypes.get_errno()))
    with open("/proc/self/setgroups", "w") as setgroups:
        setgroups.write("deny")
    with open("/proc/self/uid_map", "w") as uid_map:
        uid_map.write("%d %d 1" % (uid, uid))
    with open("/proc/self/gid_map", "w") as gid_map:
        gid_map.write("%d %d 1" % (gid, gid))
    with open("/proc/sys/user/max_user_namespaces", "w") as limit:
        limit.write(sys.argv[1])
    os.execvp(sys.argv[2], sys.argv[2:])
