/* The option registry (src/options/): the table's own consistency; every declared key accepts each of its values
 * and rejects what lies outside them, through the environment and through camdelta_tune_set, with a message naming
 * the variable or the family; a context reads the environment once, at creation; camdelta_tune_set / _get round
 * trips for every family; every CAMDELTA_* variable named in the sources is declared. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "testutil.h"

/* v as camdelta_tune_get writes it: its name where it has one. */
static void value_str(const cd_opt_decl *d, uint32_t v, char *buf, size_t size) {
  for (unsigned i = 0; d->type == CD_OPT_ONE_OF && i < d->nvalues; i++)
    if (d->values[i] == v && d->names[i]) {
      snprintf(buf, size, "%s", d->names[i]);
      return;
    }
  snprintf(buf, size, "%u", (unsigned)v);
}

/* "KEY=value" as the key's list variable holds it ("family:KEY=value" in a variable several families share). */
static void list_entry(const cd_opt_decl *d, const char *value, char *buf, size_t size) {
  if (cd_opt_family_env_shared(d->family)) snprintf(buf, size, "%s:%s=%s", cd_opt_families[d->family].name, d->key, value);
  else snprintf(buf, size, "%s=%s", d->key, value);
}

/* Values a key accepts (at most 8 of them, the ends of a range among them) and values it rejects. */
static unsigned good_values(const cd_opt_decl *d, uint32_t *v) {
  if (d->type == CD_OPT_FLAG) return v[0] = 0, v[1] = 1, 2;
  if (d->type == CD_OPT_ONE_OF) {
    for (unsigned i = 0; i < d->nvalues; i++) v[i] = d->values[i];
    return d->nvalues;
  }
  const uint32_t step = d->step > 1 ? d->step : 1;
  v[0] = d->min, v[1] = d->max, v[2] = d->min + step <= d->max ? d->min + step : d->max;
  return 3;
}

static unsigned bad_values(const cd_opt_decl *d, char bad[][24]) {
  unsigned n = 0;
  snprintf(bad[n++], 24, "x");
  snprintf(bad[n++], 24, "-1");
  snprintf(bad[n++], 24, "1x");
  snprintf(bad[n++], 24, "99999999999");
  if (d->type == CD_OPT_FLAG) snprintf(bad[n++], 24, "2");
  if (d->type == CD_OPT_RANGE) {
    if (d->min > 0) snprintf(bad[n++], 24, "%u", (unsigned)d->min - 1);
    snprintf(bad[n++], 24, "%u", (unsigned)d->max + 1);
    if (d->step > 1) snprintf(bad[n++], 24, "%u", (unsigned)(d->min + d->step / 2));
  }
  if (d->type == CD_OPT_ONE_OF) {
    uint32_t top = 0;
    for (unsigned i = 0; i < d->nvalues; i++) top = d->values[i] > top ? d->values[i] : top;
    snprintf(bad[n++], 24, "%u", (unsigned)top + 1);
    for (uint32_t x = 0; x < top; x++) { /* a hole between the allowed values, if there is one */
      unsigned i = 0;
      while (i < d->nvalues && d->values[i] != x) i++;
      if (i == d->nvalues) {
        snprintf(bad[n++], 24, "%u", (unsigned)x);
        break;
      }
    }
  }
  return n;
}

static void test_table(void **state) {
  (void)state;
  char err[512];
  if (cd_opt_check_table(err, sizeof err)) fail_msg("%s", err);
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++) assert_int_equal(cd_opt_family_find(cd_opt_families[f].name), f);
  assert_int_equal(cd_opt_family_find("no-such-family"), -1);
  assert_int_equal(cd_opt_family_find(NULL), -1);
}

/* One key through camdelta_tune_set's parser (o: the values it sets). */
static void key_through_api(int i, cd_opt_values *o) {
  const cd_opt_decl *d = &cd_opt_decls[i];
  char err[512];
  const char *fam = cd_opt_families[d->family].name;
  cd_opt_clear(o);
  uint32_t good[CD_OPT_MAX_VALUES] = {0};
  const unsigned ng = good_values(d, good);
  for (unsigned g = 0; g < ng; g++) {
    char text[320];
    snprintf(text, sizeof text, "%s=%u", d->key, (unsigned)good[g]);
    if (cd_opt_set_family(o, d->family, text, CD_OPT_FROM_API, fam, err, sizeof err))
      fail_msg("%s: '%s' rejected: %s", fam, text, err);
    assert_true(cd_opt_is_set(o, (cd_opt_id)i));
    for (int gpu = 0; gpu < 2; gpu++)
      for (int half = 0; half < 2; half++) assert_int_equal(cd_opt_get(o, (cd_opt_id)i, gpu, half), good[g]);
    if (d->type == CD_OPT_ONE_OF && d->names[g]) { /* a value's name means the value */
      snprintf(text, sizeof text, "%s=%s", d->key, d->names[g]);
      if (cd_opt_set_family(o, d->family, text, CD_OPT_FROM_API, fam, err, sizeof err))
        fail_msg("%s: '%s' rejected: %s", fam, text, err);
      assert_int_equal(cd_opt_get(o, (cd_opt_id)i, 1, 0), good[g]);
    }
  }
  char bad[12][24];
  const unsigned nb = bad_values(d, bad);
  for (unsigned b = 0; b < nb; b++) {
    char text[320];
    snprintf(text, sizeof text, "%s=%s", d->key, bad[b]);
    err[0] = '\0';
    if (!cd_opt_set_family(o, d->family, text, CD_OPT_FROM_API, fam, err, sizeof err))
      fail_msg("%s: '%s' accepted", fam, text);
    if (!strstr(err, fam) || !strstr(err, d->key)) fail_msg("%s: '%s': message '%s'", fam, text, err);
    assert_int_equal(cd_opt_get(o, (cd_opt_id)i, 1, 0), good[ng - 1]); /* unchanged */
  }
  /* every key of the family back at its default */
  assert_int_equal(cd_opt_set_family(o, d->family, "", CD_OPT_FROM_API, fam, err, sizeof err), 0);
  assert_false(cd_opt_is_set(o, (cd_opt_id)i));
  for (int k = 0; k < CD_OPT_NDEF; k++)
    assert_int_equal(cd_opt_get(o, (cd_opt_id)i, k & 1, k >> 1), d->def[k]);
}

/* Every key through camdelta_tune_set's parser (device-free): each good value round trips, each bad one fails
 * naming the family and the key and changes nothing; a family's keys not given return to their defaults. */
static void test_every_key_parses_its_values(void **state) {
  (void)state;
  static cd_opt_values o;
  for (int i = 0; i < CD_OPT_COUNT; i++)
    if (!cd_opt_decls[i].hidden) key_through_api(i, &o);
  char err[512];
  /* list syntax */
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++) {
    static const char *const bad[] = {"NOPE=1", "=1", "X", ",,Y=", "SB 4"};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
      if (!cd_opt_set_family(&o, (cd_opt_family_id)f, bad[b], CD_OPT_FROM_API, "who", err, sizeof err))
        fail_msg("%s: '%s' accepted", cd_opt_families[f].name, bad[b]);
  }
}

/* One key through the environment: its variable (or its family's list variable) set to each good and bad value. */
static void key_through_env(int i, cd_opt_values *o) {
  const cd_opt_decl *d = &cd_opt_decls[i];
  char err[512];
  const char *var = d->env ? d->env : cd_opt_families[d->family].env;
  assert_non_null(var); /* a key without a variable of its own is in its family's list */
  uint32_t good[CD_OPT_MAX_VALUES] = {0};
  const unsigned ng = good_values(d, good);
  for (unsigned g = 0; g < ng; g++) {
    char text[320], num[16];
    snprintf(num, sizeof num, "%u", (unsigned)good[g]);
    if (d->env) snprintf(text, sizeof text, "%s", num);
    else list_entry(d, num, text, sizeof text);
    setenv(var, text, 1);
    cd_opt_clear(o);
    if (cd_opt_read_env(o, err, sizeof err)) fail_msg("%s=%s rejected: %s", var, text, err);
    assert_int_equal(cd_opt_get(o, (cd_opt_id)i, 0, 1), good[g]);
    assert_int_equal(atomic_load(&o->from[i]), CD_OPT_FROM_ENV);
  }
  char bad[12][24];
  const unsigned nb = bad_values(d, bad);
  for (unsigned b = 0; b < nb; b++) {
    char text[320];
    if (d->env) snprintf(text, sizeof text, "%s", bad[b]);
    else list_entry(d, bad[b], text, sizeof text);
    setenv(var, text, 1);
    err[0] = '\0';
    cd_opt_clear(o);
    if (!cd_opt_read_env(o, err, sizeof err)) fail_msg("%s=%s accepted", var, text);
    if (!strstr(err, var)) fail_msg("%s=%s: message '%s' does not name the variable", var, text, err);
  }
  setenv(var, "", 1);
  cd_opt_clear(o);
  assert_int_equal(cd_opt_read_env(o, err, sizeof err), 0);
  assert_false(cd_opt_is_set(o, (cd_opt_id)i));
  unsetenv(var);
}

/* The environment, device-free: each key's variable (or its family's list variable) parsed like camdelta_tune_set
 * and a bad value failing with a message that names the variable; an empty variable is not set. */
static void test_every_key_through_the_environment(void **state) {
  (void)state;
  static cd_opt_values o;
  char err[512];
  for (int i = 0; i < CD_OPT_COUNT; i++) /* the process-wide families: test_process_options */
    if (!cd_opt_decls[i].hidden && !cd_opt_families[cd_opt_decls[i].family].process) key_through_env(i, &o);
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++) {
    const char *var = cd_opt_families[f].env;
    if (!var || cd_opt_families[f].process) continue;
    static const char *const bad[] = {"NOPE=1", "X", "=2"};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
      setenv(var, bad[b], 1);
      cd_opt_clear(&o);
      if (cd_opt_read_env(&o, err, sizeof err) == 0 || !strstr(err, var))
        fail_msg("%s=%s: accepted, or the message '%s' does not name the variable", var, bad[b], err);
    }
    /* a key with a variable of its own is set there, not in the list */
    for (int i = 0; i < CD_OPT_COUNT; i++) {
      const cd_opt_decl *d = &cd_opt_decls[i];
      if ((int)d->family != f || !d->env || d->hidden) continue;
      char text[320];
      uint32_t good[CD_OPT_MAX_VALUES] = {0};
      good_values(d, good);
      char num[16];
      snprintf(num, sizeof num, "%u", (unsigned)good[0]);
      list_entry(d, num, text, sizeof text);
      setenv(var, text, 1);
      cd_opt_clear(&o);
      if (cd_opt_read_env(&o, err, sizeof err) == 0 || !strstr(err, d->env))
        fail_msg("%s=%s: accepted, or the message '%s' does not name %s", var, text, err, d->env);
    }
    unsetenv(var);
  }
}

/* On a context: the environment read at creation (a bad value fails it, naming the variable, and a later change of
 * the variable does not reach the context); camdelta_tune_set / _get for every family and key. */
static void test_context_round_trips(void **state) {
  (void)state;
  char got[1024];
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    if (d->hidden || cd_opt_families[d->family].process) continue;
    const char *fam = cd_opt_families[d->family].name;
    const char *var = d->env ? d->env : cd_opt_families[d->family].env;
    uint32_t good[CD_OPT_MAX_VALUES] = {0};
    const unsigned ng = good_values(d, good);
    const uint32_t v = good[ng - 1];
    char text[320], want[128], num[16];
    snprintf(num, sizeof num, "%u", (unsigned)v);
    if (d->env) snprintf(text, sizeof text, "%s", num);
    else list_entry(d, num, text, sizeof text);
    tu_context_release();
    setenv(var, text, 1);
    camdelta_context *ctx = tu_context();
    setenv(var, "junk=junk", 1); /* read at creation only */
    assert_int_equal(cd_option(ctx, (cd_opt_id)i, CAMDELTA_F32), v);
    TU_OK(camdelta_tune_get(ctx, fam, 64, got, sizeof got));
    char vs[32];
    value_str(d, v, vs, sizeof vs);
    snprintf(want, sizeof want, "%s=%s (%s)", d->key, vs, var);
    if (!strstr(got, want)) fail_msg("tune_get(%s) '%s' lacks '%s'", fam, got, want);
    unsetenv(var);
    /* camdelta_tune_set over the environment's value, then the defaults back */
    const uint32_t w = good[0];
    snprintf(text, sizeof text, "%s=%u", d->key, (unsigned)w);
    TU_OK(camdelta_tune_set(ctx, fam, text));
    assert_int_equal(cd_option(ctx, (cd_opt_id)i, CAMDELTA_BF16), w);
    TU_OK(camdelta_tune_get(ctx, fam, 64, got, sizeof got));
    value_str(d, w, vs, sizeof vs);
    snprintf(want, sizeof want, "%s=%s (camdelta_tune_set)", d->key, vs);
    if (!strstr(got, want)) fail_msg("tune_get(%s) '%s' lacks '%s'", fam, got, want);
    TU_OK(camdelta_tune_set(ctx, fam, NULL));
    const int gpu = cd_device_gpu_like(&ctx->info);
    for (int half = 0; half < 2; half++)
      assert_int_equal(cd_option(ctx, (cd_opt_id)i, half ? CAMDELTA_F16 : CAMDELTA_F32),
                       d->def[cd_opt_default_index(gpu, half)]);
    TU_OK(camdelta_tune_get(ctx, fam, 64, got, sizeof got));
    if (strstr(got, "(camdelta_tune_set)") || strstr(got, "(CAMDELTA_")) fail_msg("defaults back: '%s'", got);
    /* a bad value leaves the context's values as they were */
    TU_OK(camdelta_tune_set(ctx, fam, text));
    char bad[12][24];
    bad_values(d, bad);
    snprintf(text, sizeof text, "%s=%s", d->key, bad[0]);
    assert_int_equal(camdelta_tune_set(ctx, fam, text), CAMDELTA_ERROR_INVALID_ARGUMENT);
    if (!strstr(camdelta_last_message(), fam) || !strstr(camdelta_last_message(), d->key))
      fail_msg("message '%s'", camdelta_last_message());
    assert_int_equal(cd_option(ctx, (cd_opt_id)i, CAMDELTA_F32), w);
    TU_OK(camdelta_tune_set(ctx, fam, ""));
  }
  tu_context_release();
  /* one bad value per variable through camdelta_context_create itself */
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    if (d->hidden || cd_opt_families[d->family].process) continue;
    char bad[12][24], text[320];
    const unsigned nb = bad_values(d, bad);
    if (d->env) snprintf(text, sizeof text, "%s", bad[nb - 1]);
    else list_entry(d, bad[nb - 1], text, sizeof text);
    const char *const one[] = {text};
    tu_check_bad_env(d->env ? d->env : cd_opt_families[d->family].env, one, 1);
  }
  /* unknown families and NULLs */
  camdelta_context *ctx = tu_context();
  assert_int_equal(camdelta_tune_set(ctx, "no-such-family", "A=1"), CAMDELTA_ERROR_INVALID_ARGUMENT);
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++)
    if (!strstr(camdelta_last_message(), cd_opt_families[f].name)) fail_msg("'%s'", camdelta_last_message());
  assert_int_equal(camdelta_tune_set(NULL, cd_opt_families[0].name, NULL), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_tune_get(ctx, "no-such-family", 64, got, sizeof got), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_tune_get(ctx, cd_opt_families[0].name, 64, NULL, 0), CAMDELTA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(camdelta_tune_get(ctx, cd_opt_families[0].name, 64, got, 2), CAMDELTA_ERROR_INVALID_ARGUMENT);
}

/* Process-wide keys (the MPI component's): read once per process, so one bad value per key, set before the first
 * read, fails every later read naming the variable, also after the variable is gone; a context neither reads them
 * at creation nor takes them from camdelta_tune_set. */
static void test_process_options(void **state) {
  (void)state;
  char err[512], got[512];
  int n = 0;
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    if (!cd_opt_families[d->family].process) continue;
    char bad[12][24];
    bad_values(d, bad);
    setenv(d->env, bad[0], 1);
    uint32_t v = 0;
    err[0] = '\0';
    assert_int_equal(cd_opt_process((cd_opt_id)i, &v, err, sizeof err), -1);
    if (!strstr(err, d->env)) fail_msg("'%s' does not name %s", err, d->env);
    camdelta_context *ctx = NULL;
    TU_OK(camdelta_context_create(&ctx, NULL)); /* not read by a context */
    const char *fam = cd_opt_families[d->family].name;
    assert_int_equal(camdelta_tune_get(ctx, fam, 64, got, sizeof got), CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), d->env));
    char text[64];
    snprintf(text, sizeof text, "%s=%u", d->key, (unsigned)d->def[0]);
    assert_int_equal(camdelta_tune_set(ctx, fam, text), CAMDELTA_ERROR_INVALID_ARGUMENT);
    assert_non_null(strstr(camdelta_last_message(), "process-wide"));
    camdelta_context_destroy(ctx);
    unsetenv(d->env);
    assert_int_equal(cd_opt_process((cd_opt_id)i, &v, err, sizeof err), -1); /* read once */
    n++;
  }
  assert_true(n > 0);
}

/* Every CAMDELTA_* variable the library or the tool names (a string literal in src/ or tools/ that is not a status
 * name) is declared in the registry, so the documentation lists it; and every variable the registry documents as
 * read elsewhere is still named outside src/options/ (a declaration outliving its reader fails too). */
static unsigned char g_named[64]; /* cd_opt_env_docs[e] named outside src/options/ */

static void scan_folder(const char *path, int *files, int *names) {
  DIR *dir = opendir(path);
  if (!dir) fail_msg("cannot open '%s'", path);
  const int registry = strstr(path, "/src/options") != NULL;
  for (struct dirent *e; (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    char sub[2048];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    const size_t n = strlen(e->d_name);
    if (n > 2 && (strcmp(e->d_name + n - 2, ".c") == 0 || strcmp(e->d_name + n - 2, ".h") == 0)) {
      FILE *f = fopen(sub, "rb");
      if (!f) fail_msg("cannot read '%s'", sub);
      static char text[1 << 20];
      const size_t len = fread(text, 1, sizeof text - 1, f);
      fclose(f);
      text[len] = '\0';
      (*files)++;
      for (const char *p = text; (p = strstr(p, "\"CAMDELTA_"));) {
        char name[96];
        size_t k = 0;
        for (p++; k + 1 < sizeof name && (isupper((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_');)
          name[k++] = *p++;
        name[k] = '\0';
        if (strcmp(name, "CAMDELTA_OK") == 0 || strncmp(name, "CAMDELTA_ERROR_", 15) == 0) continue;
        (*names)++;
        if (!cd_opt_declares(name)) fail_msg("%s names %s, which the option registry does not declare", sub, name);
        for (size_t d = 0; !registry && d < cd_opt_env_doc_count; d++)
          if (strcmp(cd_opt_env_docs[d].name, name) == 0) g_named[d] = 1;
      }
    } else if (!strchr(e->d_name, '.')) {
      scan_folder(sub, files, names);
    }
  }
  closedir(dir);
}

static void test_every_variable_declared(void **state) {
  (void)state;
  const char *root = getenv("CAMDELTA_SOURCE_DIR");
  if (!root) skip();
  assert_true(cd_opt_env_doc_count <= sizeof g_named);
  int files = 0, names = 0;
  char path[1024];
  snprintf(path, sizeof path, "%s/src", root);
  scan_folder(path, &files, &names);
  snprintf(path, sizeof path, "%s/tools", root);
  scan_folder(path, &files, &names);
  assert_true(files > 20 && names > 5);
  for (size_t d = 0; d < cd_opt_env_doc_count; d++)
    if (!g_named[d]) fail_msg("%s is documented but nothing outside src/options/ reads it", cd_opt_env_docs[d].name);
}

TU_MAIN(NULL, tu_teardown_context,
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_every_key_parses_its_values),
      cmocka_unit_test(test_every_key_through_the_environment),
      cmocka_unit_test(test_context_round_trips),
      cmocka_unit_test(test_process_options),
      cmocka_unit_test(test_every_variable_declared))
