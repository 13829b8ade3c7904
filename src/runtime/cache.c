/* The on-disk program cache (docs/cache.md).
 *
 * One file per program: <folder>/<key>.clbin where key = BLAKE2b-256 (hex) of
 * everything that determines the binary. File layout (little-endian):
 *   0   16  magic "CAMDELTA-CLBIN2\0"
 *   16  64  key (hex), must equal the file name's key
 *   80  64  device name (NUL-padded; informational, for `camdelta cache list`)
 *   144  8  payload length (must equal the file size - 184, at most CD_CACHE_MAX_PAYLOAD)
 *   152 32  BLAKE2b-256 of bytes 0..151 followed by the payload: the hash binds the payload to its key, so an
 *           entry copied or renamed under another key (even with the key field rewritten) never verifies
 *   184  .  payload (the program binary)
 *
 * Who may touch the folder (the model: ssh's StrictModes and the XDG base-directory rules). The folder is
 * reached by walking its path one component at a time with openat(O_NOFOLLOW) from a directory descriptor:
 *  - the folder itself must be a directory owned by the user, not a symbolic link, and not writable by group or
 *    others; a missing one is created 0700 (its missing parents too). camdelta changes the mode of no folder: a
 *    shared folder with the sticky bit (as /tmp) owned by root or the user is used through its private subfolder
 *    camdelta-<uid>, held to the same rule; any other folder that group or others can write is refused;
 *  - every parent must be owned by root or the user and not writable by group or others unless it has the
 *    sticky bit (as /tmp has, where nobody can rename another user's entries); a symbolic link among the
 *    parents is followed only when root or the user owns it.
 * Anything else: the call runs uncached and says why once per process on stderr (control bytes escaped).
 * Entries are opened relative to the folder's descriptor with O_NOFOLLOW | O_NONBLOCK (a FIFO never blocks)
 * and must be regular files owned by the user; the size is checked before anything is allocated.
 * Writes go to a temporary file "<name>.tmp.<16 random hex digits>" in the same folder (O_CREAT | O_EXCL |
 * O_NOFOLLOW, a fresh random name when one exists, as mkstemp does), are flushed with fsync, then renamed over
 * the file, so readers never see a partial file. Temporary files older than CD_CACHE_STALE_SECONDS (left by a
 * writer that died) are removed on the next store.
 * The tuning file (src/scan/tc_params.c) lives in the same folder under the same rules, through
 * cd_cache_open_dir, cd_cache_open_file and cd_cache_write_file.
 * Anything that does not verify is deleted and rebuilt by the caller. */
#include <blake2.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"

#ifndef S_ISVTX
#define S_ISVTX 01000 /* XSI; not exposed under plain _POSIX_C_SOURCE */
#endif

#define CD_MAGIC "CAMDELTA-CLBIN2"
#define CD_HDR 184
#define CD_TMP_MID ".tmp."          /* a temporary file is "<its file's name>.tmp.<16 random hex digits>" */
#define CD_TMP_TAG ".clbin" CD_TMP_MID

_Atomic size_t cd_cache_largest_alloc;

static atomic_int warned;
static _Thread_local char refusal[4096];
static _Thread_local int quiet; /* listing and clearing report the refusal as their error instead */

const char *cd_cache_refusal(void) { return refusal; }

/* Records why the folder is not used and says so on stderr, once per process. */
static int refuse(const char *fmt, ...) CD_PRINTF(1, 2);
static int refuse(const char *fmt, ...) {
  char raw[sizeof refusal];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  cd_escape(raw, (size_t)-1, refusal, sizeof refusal); /* paths with control bytes never reach a terminal raw */
  if (!quiet && atomic_exchange(&warned, 1) == 0)
    fprintf(stderr, "camdelta: warning: not using the kernel cache: %s; running uncached\n", refusal);
  return -1;
}

int cd_cache_folder(char *buf, size_t size) {
  const char *off = getenv("CAMDELTA_CACHE");
  if (off && strcmp(off, "0") == 0) return 0;
  const char *dir = getenv("CAMDELTA_CACHE_DIR");
  int w;
  if (dir && *dir) {
    w = snprintf(buf, size, "%s", dir);
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    /* XDG: a relative XDG_CACHE_HOME is invalid and ignored */
    if (xdg && xdg[0] == '/') w = snprintf(buf, size, "%s/camdelta", xdg);
    else if (home && *home) w = snprintf(buf, size, "%s/.cache/camdelta", home);
    else return 0;
  }
  return w > 0 && (size_t)w < size;
}

static void hex(const unsigned char *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

int cd_cache_effective_folder(char *buf, size_t size) {
  if (!cd_cache_folder(buf, size)) return 0;
  struct stat sb;
  if (stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & (S_IWGRP | S_IWOTH)) && (sb.st_mode & S_ISVTX)) {
    const size_t n = strlen(buf);
    const int w = snprintf(buf + n, size - n, "/camdelta-%ld", (long)geteuid());
    return w > 0 && (size_t)w < size - n;
  }
  return 1;
}

/* ------------------------------------------------------------ the folder */

/* Checks a parent directory: owned by root or the user, not writable by group/others unless sticky. */
static int parent_ok(int fd, const char *shown) {
  struct stat sb;
  if (fstat(fd, &sb) != 0) return refuse("%s: cannot stat: %s", shown, strerror(errno));
  if (sb.st_uid != 0 && sb.st_uid != geteuid())
    return refuse("%s is owned by uid %ld (neither you nor root)", shown, (long)sb.st_uid);
  if ((sb.st_mode & (S_IWGRP | S_IWOTH)) && !(sb.st_mode & S_ISVTX))
    return refuse("%s is writable by group or others (mode %03o)", shown, (unsigned)(sb.st_mode & 0777));
  return 0;
}

/* The folder itself, `fd` at path `shown`: one the user owns that group and others cannot write is used as it is
 * (camdelta changes the mode of no folder: those it creates are made 0700 by mkdir). A shared folder with the sticky
 * bit (as /tmp), owned by root or the user, is used through the private subfolder camdelta-<uid> in it, created
 * 0700 and held to the first rule (*sub = 1). Anything else is refused. Returns the descriptor to use (fd is
 * consumed), -1 when refused, -2 when the subfolder does not exist and !create. */
static int usable_folder(int fd, char *shown, size_t shown_size, int create, int *sub) {
  struct stat sb;
  *sub = 0;
  for (int level = 0;; level++) {
    if (fstat(fd, &sb) != 0) {
      const int e = errno;
      close(fd);
      return refuse("%s: cannot stat: %s", shown, strerror(e));
    }
    const int mine = sb.st_uid == geteuid(), shared = (sb.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    const int sticky_shared = level == 0 && shared && (sb.st_mode & S_ISVTX);
    if (mine && !shared) return fd;
    if (!mine && !(sticky_shared && sb.st_uid == 0)) {
      close(fd);
      return refuse("%s is owned by uid %ld, not by you (uid %ld)", shown, (long)sb.st_uid, (long)geteuid());
    }
    if (level > 0) {
      close(fd);
      return refuse("%s is writable by group or others (mode %03o): camdelta changes the mode of no folder it did "
                    "not create", shown, (unsigned)(sb.st_mode & 0777));
    }
    if (!(sb.st_mode & S_ISVTX)) {
      close(fd);
      return refuse("%s is writable by group or others (mode %03o) and not sticky: camdelta changes the mode of no "
                    "folder it did not create; make it private or name another folder", shown,
                    (unsigned)(sb.st_mode & 0777));
    }
    char name[64];
    snprintf(name, sizeof name, "camdelta-%ld", (long)geteuid());
    const size_t sl = strlen(shown);
    snprintf(shown + sl, shown_size - sl, "/%s", name);
    int nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0 && errno == ENOENT) {
      if (!create) {
        close(fd);
        return -2;
      }
      if (mkdirat(fd, name, 0700) != 0 && errno != EEXIST) {
        const int e = errno;
        close(fd);
        return refuse("%s: cannot create: %s", shown, strerror(e));
      }
      nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    const int e = errno;
    close(fd);
    if (nfd < 0)
      return refuse("%s: cannot open%s: %s", shown, e == ELOOP || e == ENOTDIR ? " as a real folder" : "",
                    strerror(e));
    fd = nfd;
    *sub = 1;
  }
}

/* Opens the cache folder `path` under the rules above; returns a directory descriptor, -1 when refused or
 * unusable (said on stderr), -2 when it does not exist and !create. *sub: 1 when the descriptor is of the private
 * subfolder of a shared sticky folder (usable_folder). */
static int open_folder(const char *path, int create, int *sub) {
  char rest[2 * PATH_MAX + 2], shown[PATH_MAX + 1];
  if (path[0] == '/') {
    if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest) return refuse("%s: path too long", path);
  } else {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return refuse("%s: cannot resolve a relative path: %s", path, strerror(errno));
    if (snprintf(rest, sizeof rest, "%s/%s", cwd, path) >= (int)sizeof rest) return refuse("%s: path too long", path);
  }
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return refuse("/: cannot open: %s", strerror(errno));
  if (parent_ok(fd, "/")) {
    close(fd);
    return -1;
  }
  snprintf(shown, sizeof shown, "/");
  int links = 0, final_checked = 0;
  char *p = rest;
  for (;;) {
    while (*p == '/') p++;
    if (!*p) break;
    char *q = p;
    while (*q && *q != '/') q++;
    const char saved = *q;
    *q = '\0';
    char comp[NAME_MAX + 1];
    if (snprintf(comp, sizeof comp, "%s", p) >= (int)sizeof comp) {
      close(fd);
      return refuse("%s: a path component is too long", path);
    }
    *q = saved;
    char *next = q;
    while (*next == '/') next++;
    const int last = *next == '\0';
    size_t sl = strlen(shown);
    snprintf(shown + sl, sizeof shown - sl, "%s%s", sl > 1 ? "/" : "", comp);
    if (strcmp(comp, ".") == 0) {
      p = next;
      continue;
    }
    int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0 && errno == ENOENT) {
      if (!create) {
        close(fd);
        return -2;
      }
      if (mkdirat(fd, comp, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        close(fd);
        return refuse("%s: cannot create: %s", shown, strerror(e));
      }
      nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (nfd < 0) {
      const int e = errno;
      struct stat ls;
      if (fstatat(fd, comp, &ls, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(ls.st_mode)) {
        if (last) {
          close(fd);
          return refuse("%s is a symbolic link (the cache folder itself must be a real folder)", shown);
        }
        if (ls.st_uid != 0 && ls.st_uid != geteuid()) {
          close(fd);
          return refuse("%s is a symbolic link owned by uid %ld (neither you nor root)", shown, (long)ls.st_uid);
        }
        char target[PATH_MAX + 1];
        ssize_t n = readlinkat(fd, comp, target, sizeof target - 1);
        if (n <= 0 || ++links > 16) {
          close(fd);
          return refuse("%s: cannot follow the symbolic link", shown);
        }
        target[n] = '\0';
        char joined[sizeof rest];
        if (snprintf(joined, sizeof joined, "%s/%s", target, next) >= (int)sizeof joined) {
          close(fd);
          return refuse("%s: path too long", path);
        }
        memcpy(rest, joined, strlen(joined) + 1);
        p = rest;
        if (target[0] == '/') {
          close(fd);
          fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
          if (fd < 0 || parent_ok(fd, "/")) {
            if (fd >= 0) close(fd);
            return -1;
          }
          snprintf(shown, sizeof shown, "/");
        } else {
          shown[sl] = '\0';
        }
        continue;
      }
      close(fd);
      return refuse("%s: cannot open: %s", shown, strerror(e));
    }
    close(fd);
    fd = nfd;
    if (!last) {
      if (parent_ok(fd, shown)) {
        close(fd);
        return -1;
      }
    } else {
      fd = usable_folder(fd, shown, sizeof shown, create, sub);
      if (fd < 0) return fd;
      final_checked = 1;
    }
    p = next;
  }
  if (!final_checked) {
    close(fd);
    return refuse("%s: not a usable cache folder", path);
  }
  return fd;
}

int cd_cache_open_dir(int create, char *path, size_t size) {
  char dir[PATH_MAX];
  int sub = 0;
  if (!cd_cache_folder(dir, sizeof dir)) return -2;
  const int fd = open_folder(dir, create, &sub);
  if (path && size) snprintf(path, size, sub ? "%s/camdelta-%ld" : "%s", dir, (long)geteuid());
  return fd;
}

/* ------------------------------------------------------------ files of the folder */

int cd_cache_open_file(int dfd, const char *name, uint64_t max, uint64_t *size, const char **why) {
  *why = NULL;
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) *why = errno == ELOOP ? "it is a symbolic link" : "it cannot be opened";
    return -1;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) *why = "it cannot be examined";
  else if (!S_ISREG(sb.st_mode)) *why = "it is not a regular file";
  else if (sb.st_uid != geteuid()) *why = "it is not owned by you";
  else if (sb.st_size < 0 || (uint64_t)sb.st_size > max) *why = "it is larger than the limit";
  if (*why) {
    close(fd);
    return -1;
  }
  *size = (uint64_t)sb.st_size;
  return fd;
}

int cd_cache_read_all(int fd, unsigned char *buf, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t r = pread(fd, buf + done, size - done, (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    done += (size_t)r;
  }
  unsigned char extra;
  return pread(fd, &extra, 1, (off_t)size) == 0; /* the file did not grow meanwhile */
}

static void remove_stale(int dfd);

/* A name no other writer picks: TAG followed by 16 random hex digits (as mkstemp draws its letters). */
static void random_suffix(char out[17]) {
  static atomic_uint counter;
  unsigned char r[8];
  ssize_t got = getrandom(r, sizeof r, GRND_NONBLOCK);
  if (got != (ssize_t)sizeof r) { /* no entropy yet: pid, time and a counter are unique enough with O_EXCL */
    uint64_t v = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ ((uint64_t)atomic_fetch_add(&counter, 1) << 48);
    for (int i = 0; i < 8; i++) r[i] = (unsigned char)(v >> (8 * i));
  }
  hex(r, sizeof r, out);
}

int cd_cache_write_file(int dfd, const char *name, const unsigned char *const *parts, const size_t *sizes, int n) {
  char tmp[NAME_MAX + 1];
  int fd = -1;
  /* mkstemp's method relative to the folder's descriptor: a fresh random name, created exclusively and never
   * through a link; a name that exists (even a planted one) is skipped, never opened */
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    char suffix[17];
    random_suffix(suffix);
    if (snprintf(tmp, sizeof tmp, "%s" CD_TMP_MID "%s", name, suffix) >= (int)sizeof tmp) return 0;
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return 0;
  }
  if (fd < 0) return 0;
  remove_stale(dfd);
  int ok = 1;
  for (int p = 0; p < n && ok; p++) {
    size_t done = 0;
    while (done < sizes[p]) {
      ssize_t w = write(fd, parts[p] + done, sizes[p] - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = 0;
        break;
      }
      done += (size_t)w;
    }
  }
  if (ok && fsync(fd) != 0) ok = 0;
  if (close(fd) != 0) ok = 0;
  if (ok && renameat(dfd, tmp, dfd, name) != 0) ok = 0;
  if (!ok) unlinkat(dfd, tmp, 0);
  return ok;
}

/* ------------------------------------------------------------ keys */

static void feed(blake2b_state *s, const char *field) {
  uint64_t n = strlen(field);
  blake2b_update(s, (const uint8_t *)&n, sizeof n); /* length-prefixed: fields cannot run together */
  blake2b_update(s, (const uint8_t *)field, n);
}

void cd_cache_key(camdelta_context *ctx, const char *options, const char *src, size_t src_len, char key_hex[65]) {
  blake2b_state s;
  unsigned char out[32];
  blake2b_init(&s, sizeof out);
  feed(&s, "camdelta-program-v1");
  const camdelta_device_info *in = &ctx->real_info; /* the device the binaries are built for */
  feed(&s, in->platform_name);
  feed(&s, in->platform_version);
  feed(&s, in->device_name);
  feed(&s, in->device_vendor);
  feed(&s, in->device_version);
  feed(&s, in->driver_version);
  feed(&s, CAMDELTA_VERSION_STRING);
  feed(&s, options);
  uint64_t n = src_len;
  blake2b_update(&s, (const uint8_t *)&n, sizeof n);
  blake2b_update(&s, (const uint8_t *)src, src_len);
  blake2b_final(&s, out, sizeof out);
  hex(out, sizeof out, key_hex);
}

static int is_hex_key(const char *s) {
  for (int i = 0; i < 64; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

/* 1: "<key>.clbin", 2: "<key>.clbin.tmp.*", 0: not ours. */
static int classify_name(const char *name) {
  size_t n = strlen(name);
  if (n < 70 || !is_hex_key(name) || strncmp(name + 64, ".clbin", 6) != 0) return 0;
  if (n == 70) return 1;
  if (strncmp(name + 64, CD_TMP_TAG, strlen(CD_TMP_TAG)) == 0) return 2;
  return 0;
}

static uint64_t get_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void entry_hash(const unsigned char *hdr, const unsigned char *payload, size_t len, unsigned char out[32]) {
  blake2b_state s;
  blake2b_init(&s, 32);
  blake2b_update(&s, hdr, 152);
  blake2b_update(&s, payload, len);
  blake2b_final(&s, out, 32);
}

void cd_cache_entry_seal(unsigned char *image, size_t size) {
  if (size < CD_HDR) return;
  entry_hash(image, image + CD_HDR, size - CD_HDR, image + 152);
}

int cd_cache_parse_entry(const unsigned char *bytes, size_t size, const char *key_hex, size_t *payload_len,
                         char device[65]) {
  if (device) device[0] = '\0';
  if (size < CD_HDR || memcmp(bytes, CD_MAGIC, sizeof CD_MAGIC) != 0) return 0;
  if (key_hex && memcmp(bytes + 16, key_hex, 64) != 0) return 0;
  const uint64_t plen = get_le64(bytes + 144);
  if (plen == 0 || plen > CD_CACHE_MAX_PAYLOAD || plen != (uint64_t)(size - CD_HDR)) return 0;
  unsigned char digest[32];
  entry_hash(bytes, bytes + CD_HDR, (size_t)plen, digest);
  if (memcmp(digest, bytes + 152, 32) != 0) return 0;
  if (device) {
    memcpy(device, bytes + 80, 64);
    device[64] = '\0';
    for (char *p = device; *p; p++)
      if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f) *p = '?';
  }
  *payload_len = (size_t)plen;
  return 1;
}

static void note_alloc(size_t n) {
  size_t cur = atomic_load(&cd_cache_largest_alloc);
  while (n > cur && !atomic_compare_exchange_weak(&cd_cache_largest_alloc, &cur, n)) {
  }
}

/* Reads and verifies entry `name` of folder `dfd` (cd_cache_open_file's rules; the header's length field is
 * checked before the payload is allocated). Returns a malloc'd buffer with the payload at its start, or NULL. */
static unsigned char *read_entry(int dfd, const char *name, const char *key_hex, size_t *len, char device[65],
                                 struct stat *sb_out) {
  const char *why;
  uint64_t size64 = 0;
  int fd = cd_cache_open_file(dfd, name, CD_HDR + CD_CACHE_MAX_PAYLOAD, &size64, &why);
  if (fd < 0) return NULL;
  const size_t size = (size_t)size64;
  unsigned char *buf = NULL;
  unsigned char hdr[CD_HDR];
  int ok = size >= CD_HDR && pread(fd, hdr, CD_HDR, 0) == CD_HDR && get_le64(hdr + 144) == (uint64_t)(size - CD_HDR);
  if (ok && sb_out) ok = fstat(fd, sb_out) == 0;
  if (ok) {
    note_alloc(size);
    buf = malloc(size);
    ok = buf != NULL && cd_cache_read_all(fd, buf, size);
  }
  close(fd);
  size_t plen = 0;
  if (ok) ok = cd_cache_parse_entry(buf, size, key_hex, &plen, device);
  if (!ok) {
    free(buf);
    return NULL;
  }
  memmove(buf, buf + CD_HDR, plen);
  *len = plen;
  return buf;
}

unsigned char *cd_cache_load(const char *key_hex, size_t *len) {
  int dfd = cd_cache_open_dir(0, NULL, 0);
  if (dfd < 0) return NULL;
  char name[80];
  snprintf(name, sizeof name, "%.64s.clbin", key_hex);
  unsigned char *payload = read_entry(dfd, name, key_hex, len, NULL, NULL);
  if (!payload) {
    struct stat ls;
    /* corrupt, truncated, foreign, not a regular file or not ours: never loaded, rebuilt by the caller */
    if (fstatat(dfd, name, &ls, AT_SYMLINK_NOFOLLOW) == 0) unlinkat(dfd, name, 0);
  }
  close(dfd);
  return payload;
}

void cd_cache_discard(const char *key_hex) {
  int dfd = cd_cache_open_dir(0, NULL, 0);
  if (dfd < 0) return;
  char name[80];
  snprintf(name, sizeof name, "%.64s.clbin", key_hex);
  unlinkat(dfd, name, 0);
  close(dfd);
}

/* 1 for a temporary file of the tuning file: "tune-<device>.txt.tmp.*" (src/scan/tc_params.c). */
static int is_tune_temp(const char *name) {
  const char *t = strstr(name, ".txt" CD_TMP_MID);
  return strncmp(name, "tune-", 5) == 0 && t != NULL;
}

/* Removes temporary files older than CD_CACHE_STALE_SECONDS (their writer died). */
static void remove_stale(int dfd) {
  int d2 = dup(dfd);
  if (d2 < 0) return;
  DIR *d = fdopendir(d2);
  if (!d) {
    close(d2);
    return;
  }
  const time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (classify_name(de->d_name) != 2 && !is_tune_temp(de->d_name)) continue;
    struct stat sb;
    if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && difftime(now, sb.st_mtime) > CD_CACHE_STALE_SECONDS)
      unlinkat(dfd, de->d_name, 0);
  }
  closedir(d);
}

void cd_cache_store(const char *key_hex, const unsigned char *bin, size_t len, const char *device_name) {
  if (len == 0 || (uint64_t)len > CD_CACHE_MAX_PAYLOAD) return;
  int dfd = cd_cache_open_dir(1, NULL, 0);
  if (dfd < 0) return;
  char name[80];
  snprintf(name, sizeof name, "%.64s.clbin", key_hex);
  unsigned char hdr[CD_HDR];
  memset(hdr, 0, sizeof hdr);
  memcpy(hdr, CD_MAGIC, sizeof CD_MAGIC);
  memcpy(hdr + 16, key_hex, 64);
  strncpy((char *)hdr + 80, device_name ? device_name : "", 63);
  uint64_t plen = len;
  for (int i = 0; i < 8; i++) hdr[144 + i] = (unsigned char)(plen >> (8 * i));
  entry_hash(hdr, bin, len, hdr + 152);
  const unsigned char *parts[2] = {hdr, bin};
  const size_t sizes[2] = {sizeof hdr, len};
  cd_cache_write_file(dfd, name, parts, sizes, 2);
  close(dfd);
}

/* ------------------------------------------------------------ listing */

/* Open the cache folder for listing or clearing: *dfd and *d (a stream on a duplicate of *dfd; the caller closes
 * both). No cache folder (none configured, or it does not exist): CAMDELTA_OK with *d NULL. The folder's refusal
 * (see open_folder) is the error here instead of a warning on stderr. `dir` gets the folder's path. */
static camdelta_status open_listing(const char *op, char *dir, size_t size, int *dfd, DIR **d) {
  *dfd = -1;
  *d = NULL;
  if (!cd_cache_folder(dir, size)) return CAMDELTA_OK;
  refusal[0] = '\0';
  quiet = 1;
  int sub = 0;
  const int fd = open_folder(dir, 0, &sub);
  quiet = 0;
  if (sub) {
    const size_t n = strlen(dir);
    snprintf(dir + n, size - n, "/camdelta-%ld", (long)geteuid());
  }
  if (fd == -2) return CAMDELTA_OK;
  if (fd < 0) return cd_fail(CAMDELTA_ERROR_IO, "%s: the cache folder is not used: %s", op, refusal);
  const int fd2 = dup(fd);
  DIR *stream = fd2 >= 0 ? fdopendir(fd2) : NULL;
  if (!stream) {
    const int e = errno;
    if (fd2 >= 0) close(fd2);
    close(fd);
    return cd_fail(CAMDELTA_ERROR_IO, "%s: %s: cannot list: %s", op, dir, strerror(e));
  }
  *dfd = fd;
  *d = stream;
  return CAMDELTA_OK;
}

static int newest_first(const void *a, const void *b) {
  const camdelta_cache_entry *x = a, *y = b;
  if (x->mtime != y->mtime) return x->mtime < y->mtime ? 1 : -1;
  return strcmp(x->file, y->file);
}

camdelta_status camdelta_cache_list(camdelta_cache_entry **entries, size_t *count) {
  cd_clear_error();
  if (!entries || !count)
    return cd_fail(CAMDELTA_ERROR_INVALID_ARGUMENT, "camdelta_cache_list: '%s' is NULL", entries ? "count" : "entries");
  *entries = NULL;
  *count = 0;
  char dir[PATH_MAX];
  int dfd = -1;
  DIR *d = NULL;
  camdelta_status st = open_listing("camdelta_cache_list", dir, sizeof dir, &dfd, &d);
  if (st || !d) return st;
  size_t cap = 0, n = 0;
  camdelta_cache_entry *v = NULL;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    const int kind = classify_name(de->d_name);
    if (!kind || strlen(de->d_name) >= sizeof v->file) continue;
    struct stat sb;
    if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (n == cap) {
      size_t ncap = cap ? 2 * cap : 32;
      camdelta_cache_entry *grown = realloc(v, ncap * sizeof *grown);
      if (!grown) {
        st = cd_fail(CAMDELTA_ERROR_OUT_OF_MEMORY, "camdelta_cache_list: out of host memory");
        break;
      }
      v = grown;
      cap = ncap;
    }
    camdelta_cache_entry *e = &v[n++];
    memset(e, 0, sizeof *e);
    memcpy(e->file, de->d_name, strlen(de->d_name) + 1); /* shorter than e->file: checked above */
    e->bytes = sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
    e->mtime = (int64_t)sb.st_mtime;
    if (kind == 2) {
      e->state = CAMDELTA_CACHE_ENTRY_PARTIAL;
      continue;
    }
    size_t len = 0;
    char key[65];
    memcpy(key, de->d_name, 64);
    key[64] = '\0';
    unsigned char *payload = read_entry(dfd, de->d_name, key, &len, e->device, NULL);
    e->state = payload ? CAMDELTA_CACHE_ENTRY_OK : CAMDELTA_CACHE_ENTRY_CORRUPT;
    free(payload);
  }
  closedir(d);
  close(dfd);
  if (st) {
    free(v);
    return st;
  }
  if (n > 1) qsort(v, n, sizeof *v, newest_first);
  *entries = v;
  *count = n;
  return CAMDELTA_OK;
}

void camdelta_cache_list_free(camdelta_cache_entry *entries) { free(entries); }

camdelta_status camdelta_cache_clear(size_t *removed, uint64_t *bytes) {
  cd_clear_error();
  if (removed) *removed = 0;
  if (bytes) *bytes = 0;
  char dir[PATH_MAX];
  int dfd = -1;
  DIR *d = NULL;
  camdelta_status st = open_listing("camdelta_cache_clear", dir, sizeof dir, &dfd, &d);
  if (st || !d) return st;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!classify_name(de->d_name)) continue;
    struct stat sb;
    if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (unlinkat(dfd, de->d_name, 0) == 0) {
      if (removed) (*removed)++;
      if (bytes && sb.st_size > 0) *bytes += (uint64_t)sb.st_size;
    } else if (errno != ENOENT && !st) {
      st = cd_fail(CAMDELTA_ERROR_IO, "camdelta_cache_clear: %s/%s: cannot remove: %s", dir, de->d_name,
                   strerror(errno));
    }
  }
  closedir(d);
  close(dfd);
  return st;
}
