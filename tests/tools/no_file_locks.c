// LD_PRELOAD shim for tests/cli/no_lock_manager.sh: a file system without a lock manager (NFSv3
// with rpc.statd/lockd missing or firewalled). Every lock request, flock(2) and fcntl(2) record
// locks alike, fails with ENOLCK; every other fcntl goes through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/file.h>

int flock(int fd, int operation) {
  (void)fd;
  (void)operation;
  errno = ENOLCK;
  return -1;
}

static int is_lock_request(int cmd) {
  return cmd == F_SETLK || cmd == F_SETLKW || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
}

static int forward(const char* name, int fd, int cmd, void* arg) {
  if (is_lock_request(cmd)) {
    errno = ENOLCK;
    return -1;
  }
  int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, name);
  return real(fd, cmd, arg);
}

int fcntl(int fd, int cmd, ...) {
  va_list args;
  va_start(args, cmd);
  void* arg = va_arg(args, void*);
  va_end(args);
  return forward("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...) {
  va_list args;
  va_start(args, cmd);
  void* arg = va_arg(args, void*);
  va_end(args);
  return forward("fcntl64", fd, cmd, arg);
}
