/* Passing granule file descriptors between processes over Unix sockets. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/error.h"
#include <ortmem/vmm.h>

ortmem_status ortmem_fd_send(int socket_fd, int fd)
{
    om_error_clear();
    if (socket_fd < 0 || fd < 0)
        return OM_ERR(ORTMEM_E_INVALID, "fd send: socket %d or descriptor %d is negative",
                      socket_fd, fd);
    char byte = 'g';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
    ssize_t n;
    do {
        n = sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != 1)
        return OM_ERR(ORTMEM_E_IO, "fd send: sendmsg on socket %d failed: %s", socket_fd,
                      n < 0 ? strerror(errno) : "short write");
    return ORTMEM_OK;
}

ortmem_status ortmem_fd_recv(int socket_fd, int *fd)
{
    om_error_clear();
    if (socket_fd < 0 || !fd)
        return OM_ERR(ORTMEM_E_INVALID, "fd recv: socket %d negative or output NULL", socket_fd);
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    ssize_t n;
    do {
        n = recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n != 1)
        return OM_ERR(ORTMEM_E_IO, "fd recv: recvmsg on socket %d failed: %s", socket_fd,
                      n < 0 ? strerror(errno) : "peer closed");
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    if (!cmsg || cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS ||
        cmsg->cmsg_len != CMSG_LEN(sizeof(int)))
        return OM_ERR(ORTMEM_E_IO, "fd recv: message on socket %d carried no descriptor",
                      socket_fd);
    memcpy(fd, CMSG_DATA(cmsg), sizeof *fd);
    return ORTMEM_OK;
}
