/* The output-commit module: outputs all or nothing to the last rename, across a kill -9 (see cli_outset.h). */
#include "cli_outset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "camdelta_helpers.h"
#include "cli_error.h"

#define TMP_TAG ".cdtmp."            /* ".NAME.npy.cdtmp.TOKEN": an output being written */
#define OLD_TAG ".cdold."            /* ".NAME.npy.cdold.TOKEN": the file an output replaces, until the commit */
#define JOURNAL ".camdelta-commit."  /* ".camdelta-commit.TOKEN": a commit in progress */
#define JOURNAL_MAGIC "camdelta-commit 1\n"
#define MAX_FILES 64

typedef struct out_file {
  char name[NAME_MAX + 1]; /* NAME.npy */
  int fd;                  /* the temporary file, open and flock-ed until the set ends */
} out_file;

struct cli_outset {
  char dir[PATH_MAX];
  int dfd;
  char token[48];
  out_file f[MAX_FILES];
  int n;
};

/* ------------------------------------------------------------------------------------------ test faults */

#ifdef CAMDELTA_FAULT_INJECTION
/* Only in the test build of the tool (tests/CMakeLists.txt, camdelta_faults): CAMDELTA_FAULT holds comma-separated
 * faults: rename:K makes the K-th rename of a commit fail with EIO, kill:K kills the process (SIGKILL) just before it,
 * nolink makes every hard link fail with EPERM (a file system without them). */
static int fault_has(const char *what, int k) {
  const char *f = getenv("CAMDELTA_FAULT");
  const size_t n = strlen(what);
  for (const char *p = f; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, what, n) == 0 && (k < 0 ? (p[n] == ',' || p[n] == '\0') : p[n] == ':' && atoi(p + n + 1) == k))
      return 1;
  return 0;
}
static int fault_at(int k) {
  if (fault_has("kill", k)) raise(SIGKILL);
  if (!fault_has("rename", k)) return 0;
  errno = EIO;
  return 1;
}
static int fault_nolink(void) {
  if (!fault_has("nolink", -1)) return 0;
  errno = EPERM;
  return 1;
}
#else
static int fault_at(int k) {
  (void)k;
  return 0;
}
static int fault_nolink(void) { return 0; }
#endif

/* ------------------------------------------------------------------------------------------ names */

static int has_suffix_tag(const char *s, const char *tag, const char **after) {
  const char *t = strstr(s, tag);
  if (!t) return 0;
  *after = t + strlen(tag);
  return 1;
}

/* ".NAME.npy<tag><token>" for file NAME.npy; 0 when it does not fit. */
static int hidden_name(char *buf, size_t size, const char *name, const char *tag, const char *token) {
  const int w = snprintf(buf, size, ".%s%s%s", name, tag, token);
  return w > 0 && (size_t)w < size && (size_t)w <= NAME_MAX;
}

static void new_token(char out[48]) {
  unsigned char r[8];
  static unsigned counter;
  if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) { /* no entropy yet: time and a counter */
    const unsigned long long v = (unsigned long long)time(NULL) ^ ((unsigned long long)++counter << 40);
    for (int i = 0; i < 8; i++) r[i] = (unsigned char)(v >> (8 * i));
  }
  snprintf(out, 48, "%ld-%02x%02x%02x%02x%02x%02x%02x%02x", (long)getpid(), r[0], r[1], r[2], r[3], r[4], r[5], r[6],
           r[7]);
}

/* A regular file (not a link) of the folder owned by the user. */
static int ours(int dfd, const char *name) {
  struct stat sb;
  return fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid();
}

/* ------------------------------------------------------------------------------------------ rollback */

/* Undo the commit of journal `jname` (token `token`): an output renamed into place gets its previous file back, or
 * goes when there was none; its temporary file and the kept file go; then the journal. Returns 0 when every step
 * succeeded (the journal removed), else -1 with errno (the journal stays, for a later recovery). */
static int roll_back(int dfd, const char *jname, const char *token) {
  int jfd = openat(dfd, jname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (jfd < 0) return -1;
  struct stat sb;
  char text[MAX_FILES * (NAME_MAX + 4) + 64];
  ssize_t len = -1;
  if (fstat(jfd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() && (size_t)sb.st_size < sizeof text)
    len = pread(jfd, text, sizeof text - 1, 0);
  close(jfd);
  if (len < (ssize_t)strlen(JOURNAL_MAGIC) || memcmp(text, JOURNAL_MAGIC, strlen(JOURNAL_MAGIC)) != 0) {
    /* not a journal this module wrote: left alone */
    errno = EINVAL;
    return -1;
  }
  text[len] = '\0';
  int ok = 1;
  for (char *line = text + strlen(JOURNAL_MAGIC), *nl; *line; line = nl + 1) {
    if (!(nl = strchr(line, '\n'))) break; /* a line cut short: the journal was never complete, nothing renamed */
    *nl = '\0';
    const char *name = line + 2;
    const size_t nlen = strlen(line) >= 2 ? strlen(name) : 0;
    if ((line[0] != 'n' && line[0] != 'r') || line[1] != ' ' || nlen < 5 || strchr(name, '/') ||
        strcmp(name + nlen - 4, ".npy") != 0)
      continue;
    char tmp[NAME_MAX + 1], old[NAME_MAX + 1];
    if (!hidden_name(tmp, sizeof tmp, name, TMP_TAG, token) || !hidden_name(old, sizeof old, name, OLD_TAG, token))
      continue;
    struct stat ts, ns;
    if (fstatat(dfd, tmp, &ts, AT_SYMLINK_NOFOLLOW) == 0) {
      /* not renamed yet: the name holds its previous file, or (kept by a rename where links are not supported) the
       * kept file goes back to it */
      if (unlinkat(dfd, tmp, 0) != 0) ok = 0;
      if (fstatat(dfd, name, &ns, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
        if (fstatat(dfd, old, &ns, AT_SYMLINK_NOFOLLOW) == 0 && renameat(dfd, old, dfd, name) != 0) ok = 0;
      } else {
        unlinkat(dfd, old, 0);
      }
    } else if (line[0] == 'r') {
      /* renamed: the kept file goes back (it exists: the renames start only once every file is kept) */
      struct stat os;
      if (fstatat(dfd, old, &os, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(os.st_mode) &&
          renameat(dfd, old, dfd, name) != 0)
        ok = 0;
    } else if (ours(dfd, name) && unlinkat(dfd, name, 0) != 0) {
      ok = 0;
    }
  }
  if (ok) fsync(dfd);
  if (!ok || unlinkat(dfd, jname, 0) != 0) return -1;
  fsync(dfd);
  return 0;
}

/* Under the folder's exclusive lock: every journal is of a dead commit (commits hold the lock), so it is rolled
 * back; a kept file without a journal is left over and goes; a temporary file goes when nobody holds its lock (its
 * writer is gone); one of an older camdelta (".NAME.npy.tmp.PID.TIME.N", unlocked) goes when process PID is gone. */
static int recover_locked(int dfd, const char *dir) {
  DIR *d = NULL;
  int d2 = dup(dfd);
  if (d2 >= 0 && !(d = fdopendir(d2))) close(d2);
  if (!d) return cli_error(CLI_EXIT_FAILURE, "%s: cannot list: %s", dir, strerror(errno));
  int rc = CLI_EXIT_OK;
  struct dirent *de;
  /* journals first, so that their kept files are used before the leftovers below are removed */
  for (int pass = 0; pass < 2; pass++) {
    rewinddir(d);
    while ((de = readdir(d)) != NULL) {
      const char *n = de->d_name, *after;
      if (n[0] != '.') continue;
      if (pass == 0) {
        if (strncmp(n, JOURNAL, strlen(JOURNAL)) == 0 && ours(dfd, n) && roll_back(dfd, n, n + strlen(JOURNAL)) != 0 &&
            rc == CLI_EXIT_OK)
          rc = cli_error(CLI_EXIT_FAILURE, "%s/%s: an interrupted commit could not be rolled back: %s", dir, n,
                         strerror(errno));
        continue;
      }
      if (has_suffix_tag(n, OLD_TAG, &after) && ours(dfd, n)) {
        char journal[NAME_MAX + 1];
        struct stat sb;
        snprintf(journal, sizeof journal, JOURNAL "%s", after);
        if (fstatat(dfd, journal, &sb, AT_SYMLINK_NOFOLLOW) != 0) unlinkat(dfd, n, 0);
      } else if (has_suffix_tag(n, TMP_TAG, &after)) {
        const int fd = openat(dfd, n, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat sb;
        if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
            flock(fd, LOCK_EX | LOCK_NB) == 0)
          unlinkat(dfd, n, 0); /* removed while locked: a writer that locks it next sees it gone */
        if (fd >= 0) close(fd);
      } else if (has_suffix_tag(n, ".npy.tmp.", &after) && ours(dfd, n)) {
        const long pid = strtol(after, NULL, 10);
        if (pid > 0 && pid <= INT_MAX && kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlinkat(dfd, n, 0);
      }
    }
  }
  closedir(d);
  return rc;
}

static int lock_dir(int dfd, const char *dir) {
  while (flock(dfd, LOCK_EX) != 0)
    if (errno != EINTR) return cli_error(CLI_EXIT_FAILURE, "%s: cannot lock the folder: %s", dir, strerror(errno));
  return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------------------------ the set */

int cli_make_dir(const char *dir) {
  char tmp[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof tmp) return cli_error(CLI_EXIT_USAGE, "--out: bad folder name '%s'", dir);
  memcpy(tmp, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char c = tmp[i];
      tmp[i] = '\0';
      if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return cli_error(CLI_EXIT_FAILURE, "%s: cannot create folder: %s", tmp, strerror(errno));
      tmp[i] = c;
    }
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return cli_error(CLI_EXIT_FAILURE, "%s: not a folder", dir);
  return CLI_EXIT_OK;
}

int cli_outset_recover(const char *dir) {
  const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno == ENOENT ? CLI_EXIT_OK : cli_error(CLI_EXIT_FAILURE, "%s: %s", dir, strerror(errno));
  int rc = lock_dir(dfd, dir);
  if (!rc) rc = recover_locked(dfd, dir);
  close(dfd); /* the lock goes with it */
  return rc;
}

cli_outset *cli_outset_open(const char *dir, int *rc) {
  signal(SIGXFSZ, SIG_IGN); /* a file-size limit makes write() fail with EFBIG instead of killing us */
  if ((*rc = cli_make_dir(dir))) return NULL;
  if (strlen(dir) >= PATH_MAX) {
    *rc = cli_error(CLI_EXIT_USAGE, "--out: path too long: %s", dir);
    return NULL;
  }
  cli_outset *s = calloc(1, sizeof *s);
  if (!s) {
    *rc = cli_error(CLI_EXIT_FAILURE, "out of host memory");
    return NULL;
  }
  snprintf(s->dir, sizeof s->dir, "%s", dir);
  new_token(s->token);
  s->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s->dfd < 0) {
    *rc = cli_error(CLI_EXIT_FAILURE, "%s: cannot open the folder: %s", dir, strerror(errno));
    free(s);
    return NULL;
  }
  if ((*rc = lock_dir(s->dfd, dir)) || (*rc = recover_locked(s->dfd, dir)) || flock(s->dfd, LOCK_UN) != 0) {
    if (!*rc) *rc = cli_error(CLI_EXIT_FAILURE, "%s: cannot unlock the folder: %s", dir, strerror(errno));
    close(s->dfd);
    free(s);
    return NULL;
  }
  return s;
}

/* Closes the set's descriptors (their locks go with them) and frees it; remove_temps: its temporary files first. */
static void set_free(cli_outset *s, int remove_temps) {
  for (int i = 0; i < s->n; i++) {
    char tmp[NAME_MAX + 1];
    if (remove_temps && hidden_name(tmp, sizeof tmp, s->f[i].name, TMP_TAG, s->token)) unlinkat(s->dfd, tmp, 0);
    close(s->f[i].fd);
  }
  close(s->dfd);
  free(s);
}

void cli_outset_abort(cli_outset *s) {
  if (s) set_free(s, 1);
}

/* A new temporary file for NAME.npy, created and locked: its descriptor, or -1 with errno. A recovery in another
 * process that removed it between the creation and the lock is seen (the name no longer holds this file) and the
 * file is made again. */
static int create_temp(cli_outset *s, const char *tmp) {
  for (int attempt = 0; attempt < 8; attempt++) {
    const int fd = openat(s->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    struct stat a, b;
    if (flock(fd, LOCK_EX) == 0 && fstat(fd, &a) == 0 && fstatat(s->dfd, tmp, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
        a.st_ino == b.st_ino && a.st_dev == b.st_dev)
      return fd;
    close(fd);
  }
  errno = EAGAIN;
  return -1;
}

int cli_outset_add(cli_outset *s, const char *name, camdelta_npy_type type, int ndim, const size_t *shape,
                   const void *data) {
  char file[NAME_MAX + 1], tmp[NAME_MAX + 1], path[PATH_MAX + NAME_MAX + 2], shown[4 * sizeof path + 1];
  int ok = snprintf(file, sizeof file, "%s.npy", name) < (int)sizeof file && !strchr(name, '/') && name[0] &&
           hidden_name(tmp, sizeof tmp, file, TMP_TAG, s->token);
  snprintf(path, sizeof path, "%s/%s", s->dir, file);
  cli_escape(path, shown, sizeof shown);
  if (!ok || s->n == MAX_FILES) {
    cli_outset_abort(s);
    return cli_error(CLI_EXIT_FAILURE, "%s: cannot write: %s", shown, ok ? "too many outputs" : "a bad name");
  }
  struct stat sb;
  if (fstatat(s->dfd, file, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode)) {
    cli_outset_abort(s);
    return cli_error(CLI_EXIT_FAILURE, "%s: cannot write: a folder is in the way (nothing written: previous outputs "
                     "are unchanged)", shown);
  }
  const int fd = create_temp(s, tmp);
  if (fd < 0) {
    const int e = errno;
    cli_outset_abort(s);
    return cli_error(CLI_EXIT_FAILURE, "%s: cannot create: %s (nothing written: previous outputs are unchanged)", shown,
                     strerror(e));
  }
  s->f[s->n].fd = fd;
  snprintf(s->f[s->n].name, sizeof s->f[s->n].name, "%s", file);
  s->n++; /* from here on, abort removes it */
  if (camdelta_npy_write_fd(fd, path, type, ndim, shape, data) != CAMDELTA_OK) {
    const int rc = cli_error(CLI_EXIT_FAILURE, "%s (nothing written: previous outputs are unchanged)",
                             camdelta_last_message());
    cli_outset_abort(s);
    return rc;
  }
  return CLI_EXIT_OK;
}

int cli_outset_add_device(cli_outset *s, camdelta_context *ctx, cl_mem mem, const char *name, camdelta_npy_type type,
                          int ndim, const size_t *shape) {
  size_t count = 0, bytes = 0;
  const size_t es = type == CAMDELTA_NPY_F2 || type == CAMDELTA_NPY_U2 ? 2 : type == CAMDELTA_NPY_F4 ? 4 : 8;
  if (ndim < 0 || !camdelta_size_prod(&count, (size_t)ndim, shape) || !camdelta_size_mul(&bytes, count, es)) {
    cli_outset_abort(s);
    return cli_error(CLI_EXIT_INPUT, "output %s: its size overflows size_t", name);
  }
  void *host = malloc(bytes ? bytes : 1);
  if (!host) {
    cli_outset_abort(s);
    return cli_error(CLI_EXIT_FAILURE, "output %s: out of host memory (%zu bytes)", name, bytes);
  }
  if (bytes) {
    cl_int err = clEnqueueReadBuffer(camdelta_context_queue(ctx), mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      free(host);
      cli_outset_abort(s);
      return cli_error(CLI_EXIT_DEVICE, "output %s: reading the result from the device failed: %s", name,
                       camdelta_cl_error_name(err));
    }
  }
  int rc = cli_outset_add(s, name, type, ndim, shape, host);
  free(host);
  return rc;
}

/* Writes the journal of the set (all of it, fsynced), naming for each file whether it replaces one. */
static int write_journal(cli_outset *s, const char *jname, const int *had) {
  const int fd = openat(s->dfd, jname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  char text[MAX_FILES * (NAME_MAX + 4) + 64];
  size_t len = (size_t)snprintf(text, sizeof text, "%s", JOURNAL_MAGIC);
  for (int i = 0; i < s->n; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "%c %s\n", had[i] ? 'r' : 'n', s->f[i].name);
  int ok = 1;
  for (size_t done = 0; ok && done < len;) {
    const ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) ok = 0;
    else done += (size_t)w;
  }
  ok = ok && fsync(fd) == 0;
  const int e = errno;
  close(fd);
  if (!ok) unlinkat(s->dfd, jname, 0); /* never a partial journal: nothing was renamed */
  errno = e;
  return ok;
}

int cli_outset_commit(cli_outset *s) {
  char jname[NAME_MAX + 1], shown[4 * PATH_MAX + 1];
  int had[MAX_FILES] = {0};
  int rc = lock_dir(s->dfd, s->dir);
  if (!rc) rc = recover_locked(s->dfd, s->dir); /* a commit killed since this set was opened */
  if (rc) {
    cli_outset_abort(s);
    return rc;
  }
  snprintf(jname, sizeof jname, JOURNAL "%s", s->token);
  /* which names hold a file now */
  for (int i = 0; i < s->n; i++) {
    struct stat sb;
    had[i] = fstatat(s->dfd, s->f[i].name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
  }
  int ok = write_journal(s, jname, had), e = errno, renamed = 0, failed = -1;
  const char *what = "cannot record the commit";
  /* keep each file an output replaces (a link, never followed; a symbolic link is kept as one). Another user's file
   * in a sticky folder fails here (protected hard links), before any rename. */
  for (int i = 0; ok && i < s->n; i++) {
    char old[NAME_MAX + 1];
    if (!had[i]) continue;
    int kept = hidden_name(old, sizeof old, s->f[i].name, OLD_TAG, s->token) && !fault_nolink() &&
               linkat(s->dfd, s->f[i].name, s->dfd, old, 0) == 0;
    int why = errno;
    /* a file system without hard links: the previous file is kept by a rename (the name is then absent until its
     * output is renamed in); only the user's own files, so that another user's stays where it is */
    if (!kept && (why == EPERM || why == EOPNOTSUPP || why == EMLINK || why == ENOSYS) && ours(s->dfd, s->f[i].name))
      kept = renameat(s->dfd, s->f[i].name, s->dfd, old) == 0, why = errno;
    if (!kept) ok = 0, e = why, failed = i, what = "cannot keep the previous file";
  }
  if (ok && fsync(s->dfd) != 0) ok = 0, e = errno, what = "cannot sync the folder";
  for (int i = 0; ok && i < s->n; i++) {
    char tmp[NAME_MAX + 1];
    hidden_name(tmp, sizeof tmp, s->f[i].name, TMP_TAG, s->token);
    if (fault_at(i + 1) || renameat(s->dfd, tmp, s->dfd, s->f[i].name) != 0) {
      ok = 0, e = errno, failed = i, what = "cannot replace";
      break;
    }
    renamed++;
  }
  if (ok && fsync(s->dfd) != 0) ok = 0, e = errno, what = "cannot sync the folder";
  if (ok && unlinkat(s->dfd, jname, 0) == 0) { /* the commit point */
    fsync(s->dfd);
    for (int i = 0; i < s->n; i++) {
      char old[NAME_MAX + 1];
      if (had[i] && hidden_name(old, sizeof old, s->f[i].name, OLD_TAG, s->token)) unlinkat(s->dfd, old, 0);
    }
    set_free(s, 0); /* the temporary names are the outputs now */
    return CLI_EXIT_OK;
  }
  if (ok) e = errno, what = "cannot complete the commit";
  /* roll back: the journal lists every file (or was never written, and nothing was renamed) */
  char path[PATH_MAX + NAME_MAX + 2];
  snprintf(path, sizeof path, "%s/%s", s->dir, failed >= 0 ? s->f[failed].name : "");
  cli_escape(path, shown, sizeof shown);
  struct stat sb;
  const int back = fstatat(s->dfd, jname, &sb, AT_SYMLINK_NOFOLLOW) != 0 || roll_back(s->dfd, jname, s->token) == 0;
  cli_outset_abort(s);
  if (back)
    return cli_error(CLI_EXIT_FAILURE, "%s: %s: %s; nothing was changed (%d output%s already renamed restored)", shown,
                     what, strerror(e), renamed, renamed == 1 ? "" : "s");
  return cli_error(CLI_EXIT_FAILURE, "%s: %s: %s; the rollback failed too (the next output set written to the folder "
                   "retries it)", shown, what, strerror(e));
}
