// Runs a command under the part of Docker's and containerd's default seccomp profile that matters
// to bubblewrap: for a process without CAP_SYS_ADMIN, unshare, mount, umount2, pivot_root, setns
// and clone with namespace flags are denied (clone3 answers ENOSYS, as there, so libc uses clone).
// Build: cc -o deny_ns deny_ns.c -lseccomp
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: deny_ns COMMAND [ARG...]\n");
        return 2;
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) return 1;
    const int denied[] = {SCMP_SYS(unshare), SCMP_SYS(mount), SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(setns)};
    for (unsigned i = 0; i < sizeof denied / sizeof *denied; ++i)
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), denied[i], 0);
    const long ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                             CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
    for (unsigned i = 0; i < sizeof ns_flags / sizeof *ns_flags; ++i)
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (seccomp_load(ctx) != 0) {
        perror("seccomp_load");
        return 1;
    }
    seccomp_release(ctx);
    execvp(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
