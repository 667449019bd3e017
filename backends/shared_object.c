#include "backends/shared_object.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_kind.h"

/* This process's ELF class, byte order and machine: what the loader takes
 * from a file on its search path (others it passes over). */
#if __ELF_NATIVE_CLASS == 64
#define NATIVE_CLASS ELFCLASS64
#else
#define NATIVE_CLASS ELFCLASS32
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif
#if defined(__x86_64__)
#define NATIVE_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define NATIVE_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define NATIVE_MACHINE EM_PPC64
#elif defined(__i386__)
#define NATIVE_MACHINE EM_386
#else
#define NATIVE_MACHINE EM_NONE /* not compared */
#endif

typedef ElfW(Ehdr) ehdr_t;
typedef ElfW(Phdr) phdr_t;

static kvs_so_verdict say(kvs_so_verdict verdict, char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static kvs_so_verdict say(kvs_so_verdict verdict, char *why, size_t cap, const char *fmt, ...) {
  if (why != NULL && cap > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
  }
  return verdict;
}

/* Up to n bytes at offset; the count read (short at the end of the file),
 * or -1 with errno. */
static ssize_t read_at(int fd, void *buf, size_t n, uint64_t offset) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* offset + bytes, saturated. */
static uint64_t end_of(uint64_t offset, uint64_t bytes) {
  return bytes > UINT64_MAX - offset ? UINT64_MAX : offset + bytes;
}

static const char *segment_name(uint32_t type) {
  switch (type) {
    case PT_LOAD:
      return "loadable segment";
    case PT_DYNAMIC:
      return "dynamic section (PT_DYNAMIC)";
    case PT_INTERP:
      return "interpreter name (PT_INTERP)";
    case PT_NOTE:
      return "note segment (PT_NOTE)";
    case PT_PHDR:
      return "program header segment (PT_PHDR)";
    case PT_TLS:
      return "thread-local data (PT_TLS)";
    case PT_GNU_EH_FRAME:
      return "unwind table (PT_GNU_EH_FRAME)";
    case PT_GNU_RELRO:
      return "read-only-after-relocation range (PT_GNU_RELRO)";
    default:
      return "segment";
  }
}

/* Every program header's file range inside the file, the loadable ones
 * first (those are what the loader maps). */
static kvs_so_verdict check_segments(int fd, const char *path, const ehdr_t *h, uint64_t size,
                                     char *why, size_t cap) {
  size_t loads = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < h->e_phnum; i++) {
      phdr_t p;
      ssize_t n = read_at(fd, &p, sizeof p, h->e_phoff + (uint64_t)i * sizeof p);
      if (n != (ssize_t)sizeof p) {
        return say(KVS_SO_BROKEN, why, cap, "%s cannot be read: %s", path,
                   n < 0 ? strerror(errno) : "it shrank while it was read");
      }
      if ((p.p_type == PT_LOAD) != (pass == 0)) continue;
      if (p.p_type == PT_LOAD) loads++;
      uint64_t need = end_of(p.p_offset, p.p_filesz);
      if (p.p_filesz > 0 && need > size) {
        return say(KVS_SO_BROKEN, why, cap,
                   "%s is cut short: its %s at offset %" PRIu64 " needs %" PRIu64
                   " bytes of the file, which has %" PRIu64 " (an interrupted copy? copy it again)",
                   path, segment_name(p.p_type), (uint64_t)p.p_offset, need, size);
      }
    }
    if (pass == 0 && loads == 0) {
      return say(KVS_SO_BROKEN, why, cap,
                 "%s is not a shared object the loader can map: it has no loadable segment", path);
    }
  }
  return KVS_SO_OK;
}

static const char *type_name(unsigned type) {
  switch (type) {
    case ET_EXEC:
      return "an executable";
    case ET_REL:
      return "a relocatable object";
    case ET_CORE:
      return "a core dump";
    default:
      return "not a shared object";
  }
}

static const char *class_name(unsigned c) {
  return c == ELFCLASS64 ? "64-bit" : c == ELFCLASS32 ? "32-bit" : "unknown-class";
}

static const char *data_name(unsigned d) {
  return d == ELFDATA2LSB   ? "little-endian"
         : d == ELFDATA2MSB ? "big-endian"
                            : "unknown-byte-order";
}

/* The ELF header and program headers of the open file. */
static kvs_so_verdict check_elf(int fd, const char *path, uint64_t size, char *why, size_t cap) {
  ehdr_t h;
  memset(&h, 0, sizeof h);
  ssize_t n = read_at(fd, &h, sizeof h, 0);
  if (n < 0) return say(KVS_SO_BROKEN, why, cap, "%s cannot be read: %s", path, strerror(errno));
  size_t magic = (size_t)n < SELFMAG ? (size_t)n : SELFMAG;
  if (memcmp(h.e_ident, ELFMAG, magic) != 0) {
    return say(KVS_SO_BROKEN, why, cap,
               "%s is not a shared object: it does not start with the ELF magic (\\177ELF)", path);
  }
  if ((size_t)n < EI_NIDENT) {
    return say(KVS_SO_BROKEN, why, cap,
               "%s is cut short: %" PRIu64 " bytes, less than an ELF header (%zu bytes)", path,
               size, sizeof h);
  }
  if (h.e_ident[EI_CLASS] != NATIVE_CLASS || h.e_ident[EI_DATA] != NATIVE_DATA) {
    return say(KVS_SO_PASSED_OVER, why, cap, "%s is a %s %s ELF object; this process is %s %s",
               path, class_name(h.e_ident[EI_CLASS]), data_name(h.e_ident[EI_DATA]),
               class_name(NATIVE_CLASS), data_name(NATIVE_DATA));
  }
  if ((size_t)n < sizeof h) {
    return say(KVS_SO_BROKEN, why, cap,
               "%s is cut short: %" PRIu64 " bytes, less than an ELF header (%zu bytes)", path,
               size, sizeof h);
  }
  if (NATIVE_MACHINE != EM_NONE && h.e_machine != NATIVE_MACHINE) {
    return say(KVS_SO_PASSED_OVER, why, cap,
               "%s is an ELF object for machine %u; this process runs on machine %u", path,
               h.e_machine, (unsigned)NATIVE_MACHINE);
  }
  if (h.e_type != ET_DYN) {
    return say(KVS_SO_BROKEN, why, cap, "%s is not a shared object: its ELF type %u is %s", path,
               h.e_type, type_name(h.e_type));
  }
  if (h.e_phnum == 0 || h.e_phentsize != sizeof(phdr_t)) {
    return say(KVS_SO_BROKEN, why, cap,
               "%s is not a shared object the loader can map: %u program headers of %u bytes "
               "(expected at least 1 of %zu)",
               path, h.e_phnum, h.e_phentsize, sizeof(phdr_t));
  }
  uint64_t table = end_of(h.e_phoff, (uint64_t)h.e_phnum * sizeof(phdr_t));
  if (table > size) {
    return say(KVS_SO_BROKEN, why, cap,
               "%s is cut short: its %u program headers at offset %" PRIu64 " need %" PRIu64
               " bytes of the file, which has %" PRIu64 " (an interrupted copy? copy it again)",
               path, h.e_phnum, (uint64_t)h.e_phoff, table, size);
  }
  return check_segments(fd, path, &h, size, why, cap);
}

kvs_so_verdict kvs_shared_object_check(const char *path, char *why, size_t cap) {
  if (why != NULL && cap > 0) why[0] = '\0';
  if (path == NULL) return say(KVS_SO_ABSENT, why, cap, "no path given");
  /* O_NONBLOCK: a FIFO's open returns at once instead of waiting for a
   * writer; nothing is read before fstat says the file is regular. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) return say(KVS_SO_ABSENT, why, cap, "%s: not there", path);
    if (e == EACCES || e == EPERM) {
      return say(KVS_SO_PASSED_OVER, why, cap, "%s cannot be read: %s", path, strerror(e));
    }
    return say(KVS_SO_BROKEN, why, cap, "%s cannot be opened: %s", path, strerror(e));
  }
  struct stat st;
  kvs_so_verdict verdict;
  const char *kind = NULL;
  if (fstat(fd, &st) != 0) {
    verdict = say(KVS_SO_BROKEN, why, cap, "%s cannot be examined: %s", path, strerror(errno));
  } else if ((kind = kvs_file_kind(st.st_mode)) != NULL) {
    verdict = say(KVS_SO_BROKEN, why, cap, "%s is %s, not a shared object", path, kind);
  } else if (st.st_size == 0) {
    verdict = say(KVS_SO_BROKEN, why, cap, "%s is empty (0 bytes), not a shared object", path);
  } else {
    verdict = check_elf(fd, path, (uint64_t)st.st_size, why, cap);
  }
  close(fd);
  return verdict;
}
