// gethostname for the test binary: the calling thread's stand-in host name
// when a test set one (kvs_standin::set_thread_hostname), so ranks that are
// threads of one process can be ranks on different nodes; the real one
// otherwise. Defined in the executable, it takes precedence over libc's.
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tests/standin/engine.h"

extern "C" int gethostname(char *name, size_t len) {
  std::string host = kvs_standin::thread_hostname();
  if (host.empty()) {
    struct utsname u;
    if (uname(&u) != 0) return -1;
    host = u.nodename;
  }
  if (len == 0) {
    errno = EINVAL;
    return -1;
  }
  std::strncpy(name, host.c_str(), len);
  if (host.size() >= len) {
    name[len - 1] = '\0';
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}
