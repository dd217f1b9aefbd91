/*
 * memprobe.c -- reading memory that may not be there, without faulting.
 *
 * A backend handed an integer it must take for a runtime's object (a
 * cl_command_queue the caller says is one) can look at it first through
 * the kernel, which answers EFAULT where a load would have been SIGSEGV:
 * process_vm_readv on the process itself, or, where a sandbox forbids
 * that call, a write of the bytes into a pipe.  Neither is a load of the
 * process's own, so sanitizers see no access either.
 */
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

int sw__mem_probe(uintptr_t addr, void *dst, size_t n)
{
    if (n == 0)
        return 1;
    if (addr == 0 || addr > UINTPTR_MAX - n)
        return 0;
    struct iovec local = {dst, n}, remote = {(void *)addr, n};
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (got == (ssize_t)n)
        return 1;
    if (got >= 0 || errno == EFAULT)
        return 0;
    /* ENOSYS, EPERM (seccomp): through a pipe instead. */
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    ssize_t w = write(fds[1], (const void *)addr, n);
    int e = errno;
    int r = -1;
    if (w == (ssize_t)n)
        r = read(fds[0], dst, n) == (ssize_t)n ? 1 : -1;
    else if (w >= 0 || e == EFAULT)
        r = 0;
    close(fds[0]);
    close(fds[1]);
    return r;
}
