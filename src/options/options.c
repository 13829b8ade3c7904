/* The option registry's mechanism (options.h): parsing values against their declarations, the environment read
 * at context creation, a family's values replaced at once, their description and the generated documentation. */
#include "options/options.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

/* ------------------------------------------------------------------ messages */

static int fail(char *err, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(char *err, size_t size, const char *fmt, ...) {
  if (err && size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Appends to buf[size] at *len (truncating, never overflowing). */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
  if (*len >= size) return;
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(buf + *len, size - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len = *len + (size_t)n < size ? *len + (size_t)n : size - 1;
}

/* The value `v` of d as text: its name where it has one. */
static void value_text(const cd_opt_decl *d, uint32_t v, char *buf, size_t size) {
  if (v == CD_OPT_AUTO) {
    snprintf(buf, size, "auto");
    return;
  }
  if (d->type == CD_OPT_ONE_OF)
    for (unsigned i = 0; i < d->nvalues; i++)
      if (d->values[i] == v && d->names[i]) {
        snprintf(buf, size, "%s", d->names[i]);
        return;
      }
  snprintf(buf, size, "%u", (unsigned)v);
}

/* What d accepts, for messages and the documentation: "4, 8 or 16", "a whole number from 1 to 64", ... */
static void allowed_text(const cd_opt_decl *d, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  if (d->type == CD_OPT_FLAG) {
    append(buf, size, &len, "0 or 1");
  } else if (d->type == CD_OPT_RANGE) {
    if (d->step > 1)
      append(buf, size, &len, "a multiple of %u from %u to %u", (unsigned)d->step, (unsigned)d->min, (unsigned)d->max);
    else
      append(buf, size, &len, "a whole number from %u to %u", (unsigned)d->min, (unsigned)d->max);
  } else {
    for (unsigned i = 0; i < d->nvalues; i++) {
      char v[32];
      value_text(d, d->values[i], v, sizeof v);
      append(buf, size, &len, "%s%s", !i ? "" : i + 1 == d->nvalues ? " or " : ", ", v);
    }
  }
}

/* ------------------------------------------------------------------ values */

/* Parses text[0..len) as a value of d: a plain decimal (no sign, no spaces) or, for CD_OPT_ONE_OF, a value's name. */
static int parse_value(const cd_opt_decl *d, const char *text, size_t len, uint32_t *out) {
  if (d->type == CD_OPT_ONE_OF)
    for (unsigned i = 0; i < d->nvalues; i++)
      if (d->names[i] && strlen(d->names[i]) == len && strncmp(d->names[i], text, len) == 0) {
        *out = d->values[i];
        return 1;
      }
  if (len == 0 || len > 10) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') return 0;
    v = v * 10 + (uint64_t)(text[i] - '0');
  }
  if (v >= UINT32_MAX) return 0;
  const uint32_t x = (uint32_t)v;
  switch (d->type) {
  case CD_OPT_FLAG:
    if (x > 1) return 0;
    break;
  case CD_OPT_RANGE:
    if (x < d->min || x > d->max || (d->step > 1 && x % d->step)) return 0;
    break;
  case CD_OPT_ONE_OF: {
    unsigned i = 0;
    while (i < d->nvalues && d->values[i] != x) i++;
    if (i == d->nvalues) return 0;
    break;
  }
  }
  *out = x;
  return 1;
}

void cd_opt_clear(cd_opt_values *o) {
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    atomic_store(&o->v[i], 0);
    atomic_store(&o->from[i], (unsigned char)CD_OPT_FROM_DEFAULT);
  }
}

void cd_opt_put(cd_opt_values *o, cd_opt_id id, uint32_t value, cd_opt_source from) {
  atomic_store(&o->from[id], (unsigned char)from);
  atomic_store(&o->v[id], value + 1);
}

int cd_opt_is_set(const cd_opt_values *o, cd_opt_id id) { return atomic_load(&o->v[id]) != 0; }

cd_opt_source cd_opt_from(const cd_opt_values *o, cd_opt_id id) {
  return cd_opt_is_set(o, id) ? (cd_opt_source)atomic_load(&o->from[id]) : CD_OPT_FROM_DEFAULT;
}

void cd_opt_source_name(const cd_opt_values *o, cd_opt_id id, char *buf, size_t size) {
  const cd_opt_decl *d = &cd_opt_decls[id];
  const cd_opt_family *fm = &cd_opt_families[d->family];
  if (cd_opt_from(o, id) == CD_OPT_FROM_API) snprintf(buf, size, "camdelta_tune_set(%s)", fm->name);
  else snprintf(buf, size, "%s", d->env ? d->env : fm->env ? fm->env : fm->name);
}

uint32_t cd_opt_get(const cd_opt_values *o, cd_opt_id id, int gpu_like, int half) {
  const uint32_t v = atomic_load(&o->v[id]);
  return v ? v - 1 : cd_opt_decls[id].def[cd_opt_default_index(gpu_like, half)];
}

/* ------------------------------------------------------------------ families */

int cd_opt_family_find(const char *name) {
  for (int f = 0; name && f < CD_OPT_FAM_COUNT; f++)
    if (strcmp(name, cd_opt_families[f].name) == 0) return f;
  return -1;
}

void cd_opt_family_names(char *buf, size_t size) {
  size_t len = 0;
  if (size) buf[0] = '\0';
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++) append(buf, size, &len, "%s%s", f ? ", " : "", cd_opt_families[f].name);
}

/* The keys of family f that a list accepts, space-separated (own_var: also those with a variable of their own). */
static void family_keys(cd_opt_family_id f, int own_var, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    if (d->family == f && !d->hidden && (own_var || !d->env)) append(buf, size, &len, "%s%s", len ? " " : "", d->key);
  }
}

/* Parses the list "KEY=V,KEY=V" (commas or spaces between entries) of family f into val/given (indexed by id).
 * own_var: keys with a variable of their own are accepted too (camdelta_tune_set); src names the list in messages
 * ("CAMDELTA_PREP_TILES", "camdelta_tune_set(prep)"). */
int cd_opt_list_next(const char **p, const char **key, size_t *klen, const char **val, size_t *vlen) {
  const char *s = *p;
  while (*s == ' ' || *s == ',') s++;
  if (!*s) return *p = s, 0;
  *key = s;
  while (*s && *s != '=' && *s != ',' && *s != ' ') s++;
  *klen = (size_t)(s - *key);
  if (*s != '=') return *p = s, -1;
  *val = ++s;
  while (*s && *s != ',' && *s != ' ') s++;
  *vlen = (size_t)(s - *val);
  *p = s;
  return 1;
}

static int parse_list(cd_opt_family_id f, const char *text, int own_var, const char *src, uint32_t *val,
                      unsigned char *given, char *err, size_t err_size) {
  const char *p = text, *key = NULL, *v = NULL;
  size_t klen = 0, vlen = 0;
  for (int r; (r = cd_opt_list_next(&p, &key, &klen, &v, &vlen));) {
    if (r < 0) return fail(err, err_size, "%s: '%.*s' is not KEY=V (value: '%s')", src, (int)klen, key, text);
    int id = -1;
    for (int i = 0; i < CD_OPT_COUNT && id < 0; i++) {
      const cd_opt_decl *d = &cd_opt_decls[i];
      if (d->family == f && !d->hidden && strlen(d->key) == klen && strncmp(d->key, key, klen) == 0) id = i;
    }
    if (id >= 0 && cd_opt_decls[id].env && !own_var)
      return fail(err, err_size, "%s: %s has a variable of its own, %s (value: '%s')", src, cd_opt_decls[id].key,
                  cd_opt_decls[id].env, text);
    if (id < 0) {
      char known[256];
      family_keys(f, own_var, known, sizeof known);
      return fail(err, err_size, "%s: unknown key '%.*s' (known: %s)", src, (int)klen, key, known);
    }
    const cd_opt_decl *d = &cd_opt_decls[id];
    if (given[id]) return fail(err, err_size, "%s: %s given twice (value: '%s')", src, d->key, text);
    if (!parse_value(d, v, vlen, &val[id])) {
      char allowed[256];
      allowed_text(d, allowed, sizeof allowed);
      return fail(err, err_size, "%s: %s must be %s (value: '%s')", src, d->key, allowed, text);
    }
    given[id] = 1;
  }
  return 0;
}

int cd_opt_family_env_shared(cd_opt_family_id f) {
  const char *var = cd_opt_families[f].env;
  for (int g = 0; var && g < CD_OPT_FAM_COUNT; g++)
    if (g != (int)f && cd_opt_families[g].env && strcmp(cd_opt_families[g].env, var) == 0) return 1;
  return 0;
}

/* A list variable that several families share: "family:KEY=V,...;family:KEY=V,..." (family one of those sharing
 * var). */
static int parse_shared(const char *var, const char *text, uint32_t *val, unsigned char *given, char *err,
                        size_t err_size) {
  for (const char *p = text; *p;) {
    const char *end = strchr(p, ';');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    if (!colon)
      return fail(err, err_size, "%s: '%.*s' is not FAMILY:KEY=V,... (value: '%s')", var, (int)len, p, text);
    int f = -1;
    for (int g = 0; g < CD_OPT_FAM_COUNT && f < 0; g++)
      if (cd_opt_families[g].env && strcmp(cd_opt_families[g].env, var) == 0 &&
          strlen(cd_opt_families[g].name) == (size_t)(colon - p) && strncmp(cd_opt_families[g].name, p, (size_t)(colon - p)) == 0)
        f = g;
    if (f < 0) {
      char names[256];
      size_t n = 0;
      names[0] = '\0';
      for (int g = 0; g < CD_OPT_FAM_COUNT; g++)
        if (cd_opt_families[g].env && strcmp(cd_opt_families[g].env, var) == 0)
          append(names, sizeof names, &n, "%s%s", n ? ", " : "", cd_opt_families[g].name);
      return fail(err, err_size, "%s: unknown family '%.*s' (%s)", var, (int)(colon - p), p, names);
    }
    char list[512];
    const size_t llen = len - (size_t)(colon + 1 - p);
    if (llen >= sizeof list) return fail(err, err_size, "%s: '%.*s' is too long", var, (int)len, p);
    memcpy(list, colon + 1, llen);
    list[llen] = '\0';
    if (parse_list((cd_opt_family_id)f, list, 0, var, val, given, err, err_size)) return -1;
    p += len;
    if (*p == ';') p++;
  }
  return 0;
}

int cd_opt_read_env(cd_opt_values *o, char *err, size_t err_size) {
  uint32_t val[CD_OPT_COUNT] = {0};
  unsigned char given[CD_OPT_COUNT] = {0};
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++) {
    if (cd_opt_families[f].process) continue;
    const char *var = cd_opt_families[f].env;
    int first = 1; /* a shared variable is read once, with the first family that names it */
    for (int g = 0; var && g < f; g++)
      if (cd_opt_families[g].env && strcmp(cd_opt_families[g].env, var) == 0) first = 0;
    const char *text = var && first ? getenv(var) : NULL;
    if (!text || !*text) continue;
    if (cd_opt_family_env_shared((cd_opt_family_id)f) ? parse_shared(var, text, val, given, err, err_size)
                                                      : parse_list((cd_opt_family_id)f, text, 0, var, val, given, err,
                                                                   err_size))
      return -1;
  }
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    const char *text = d->env && !cd_opt_families[d->family].process ? getenv(d->env) : NULL;
    if (text && *text && !parse_value(d, text, strlen(text), &val[i])) {
      char allowed[256];
      allowed_text(d, allowed, sizeof allowed);
      return fail(err, err_size, "%s must be %s (value: '%s')", d->env, allowed, text);
    }
    if (text && *text) given[i] = 1;
  }
  for (int i = 0; i < CD_OPT_COUNT; i++)
    if (given[i]) cd_opt_put(o, (cd_opt_id)i, val[i], CD_OPT_FROM_ENV);
  return 0;
}

/* The process-wide keys, read together the first time one is asked for. */
static once_flag process_once = ONCE_FLAG_INIT;
static uint32_t process_value[CD_OPT_COUNT];
static char process_error[CD_OPT_COUNT][512];

static void read_process(void) {
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    if (!cd_opt_families[d->family].process) continue;
    process_value[i] = d->def[0];
    const char *text = d->env ? getenv(d->env) : NULL;
    if (text && *text && !parse_value(d, text, strlen(text), &process_value[i])) {
      char allowed[160];
      allowed_text(d, allowed, sizeof allowed);
      snprintf(process_error[i], sizeof process_error[i], "%s must be %s (value: '%.40s')", d->env, allowed, text);
    }
  }
}

int cd_opt_process(cd_opt_id id, uint32_t *value, char *err, size_t err_size) {
  call_once(&process_once, read_process);
  if (!cd_opt_families[cd_opt_decls[id].family].process)
    return fail(err, err_size, "%s: not a process-wide option", cd_opt_decls[id].key);
  if (process_error[id][0]) return fail(err, err_size, "%s", process_error[id]);
  *value = process_value[id];
  return 0;
}

int cd_opt_set_family(cd_opt_values *o, cd_opt_family_id f, const char *params, cd_opt_source from, const char *who,
                      char *err, size_t err_size) {
  uint32_t val[CD_OPT_COUNT] = {0};
  unsigned char given[CD_OPT_COUNT] = {0};
  if (params && *params && parse_list(f, params, 1, who, val, given, err, err_size)) return -1;
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    if (cd_opt_decls[i].family != f || cd_opt_decls[i].hidden) continue;
    if (given[i]) {
      cd_opt_put(o, (cd_opt_id)i, val[i], from);
    } else {
      atomic_store(&o->v[i], 0);
      atomic_store(&o->from[i], (unsigned char)CD_OPT_FROM_DEFAULT);
    }
  }
  return 0;
}

/* A default as text: "64", "auto", "8 (16-bit: 16)" for one device class. */
static void default_text(const cd_opt_decl *d, int gpu_like, char *buf, size_t size) {
  char a[32], b[32];
  value_text(d, d->def[cd_opt_default_index(gpu_like, 0)], a, sizeof a);
  value_text(d, d->def[cd_opt_default_index(gpu_like, 1)], b, sizeof b);
  if (strcmp(a, b) == 0) snprintf(buf, size, "%s", a);
  else snprintf(buf, size, "%s (16-bit: %s)", a, b);
}

void cd_opt_describe_family(const cd_opt_values *o, cd_opt_family_id f, int gpu_like, char *buf, size_t size) {
  size_t len = 0;
  if (size) buf[0] = '\0';
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    if (d->family != f || d->hidden) continue;
    char v[128];
    const uint32_t raw = atomic_load(&o->v[i]);
    if (raw) {
      char t[32];
      value_text(d, raw - 1, t, sizeof t);
      const int api = atomic_load(&o->from[i]) == CD_OPT_FROM_API;
      snprintf(v, sizeof v, "%s (%s)", t,
               api ? "camdelta_tune_set" : d->env ? d->env : cd_opt_families[f].env ? cd_opt_families[f].env : "?");
    } else {
      default_text(d, gpu_like, v, sizeof v);
    }
    append(buf, size, &len, "%s%s=%s", len ? " " : "", d->key, v);
  }
}

/* ------------------------------------------------------------------ the table's own checks */

static int var_declared_before(const char *name, int upto_decl, int upto_family, size_t upto_env) {
  for (int i = 0; i < upto_decl; i++)
    if (cd_opt_decls[i].env && strcmp(cd_opt_decls[i].env, name) == 0) return 1;
  for (int f = 0; f < upto_family; f++)
    if (cd_opt_families[f].env && strcmp(cd_opt_families[f].env, name) == 0) return 1;
  for (size_t e = 0; e < upto_env; e++)
    if (strcmp(cd_opt_env_docs[e].name, name) == 0) return 1;
  return 0;
}

int cd_opt_declares(const char *name) {
  return var_declared_before(name, CD_OPT_COUNT, CD_OPT_FAM_COUNT, cd_opt_env_doc_count);
}

static int allowed_value(const cd_opt_decl *d, uint32_t v) {
  if (v == CD_OPT_AUTO) return 1;
  char text[16];
  snprintf(text, sizeof text, "%u", (unsigned)v);
  uint32_t x;
  return parse_value(d, text, strlen(text), &x);
}

int cd_opt_check_table(char *err, size_t err_size) {
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++) {
    const cd_opt_family *fm = &cd_opt_families[f];
    if (!fm->name || !fm->doc) return fail(err, err_size, "family %d: no name or doc", f);
    if (fm->env && (var_declared_before(fm->env, CD_OPT_COUNT, 0, cd_opt_env_doc_count)))
      return fail(err, err_size, "family %s: %s declared twice", fm->name, fm->env);
    int keys = 0;
    for (int i = 0; i < CD_OPT_COUNT; i++) keys += (int)cd_opt_decls[i].family == f && !cd_opt_decls[i].hidden;
    if (!keys) return fail(err, err_size, "family %s: no key", fm->name);
    if (fm->process && fm->env) return fail(err, err_size, "family %s: a process-wide family has no list", fm->name);
  }
  for (int i = 0; i < CD_OPT_COUNT; i++) {
    const cd_opt_decl *d = &cd_opt_decls[i];
    if (!d->key || !d->doc) return fail(err, err_size, "option %d: no key or doc", i);
    if ((int)d->family < 0 || d->family >= CD_OPT_FAM_COUNT)
      return fail(err, err_size, "%s: family %d out of range", d->key, (int)d->family);
    for (const char *c = d->key; *c; c++)
      if (!((*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_'))
        return fail(err, err_size, "%s: keys are upper case, digits and '_'", d->key);
    for (int j = 0; j < i; j++)
      if (cd_opt_decls[j].family == d->family && strcmp(cd_opt_decls[j].key, d->key) == 0)
        return fail(err, err_size, "%s: declared twice in family %s", d->key, cd_opt_families[d->family].name);
    if (d->hidden && d->env) return fail(err, err_size, "%s: a hidden option has no variable", d->key);
    if (cd_opt_families[d->family].process && (!d->env || d->hidden || d->def[0] == CD_OPT_AUTO))
      return fail(err, err_size, "%s: a process-wide option has a variable of its own and one default", d->key);
    for (int k = 1; cd_opt_families[d->family].process && k < CD_OPT_NDEF; k++)
      if (d->def[k] != d->def[0])
        return fail(err, err_size, "%s: a process-wide option has one default", d->key);
    if (d->env && var_declared_before(d->env, i, CD_OPT_FAM_COUNT, 0))
      return fail(err, err_size, "%s: %s declared twice", d->key, d->env);
    if (d->type == CD_OPT_RANGE && (d->min > d->max || d->max >= UINT32_MAX))
      return fail(err, err_size, "%s: range [%u, %u]", d->key, (unsigned)d->min, (unsigned)d->max);
    if (d->type == CD_OPT_ONE_OF && (d->nvalues < 1 || d->nvalues > CD_OPT_MAX_VALUES))
      return fail(err, err_size, "%s: %u values", d->key, d->nvalues);
    if (d->type != CD_OPT_ONE_OF && d->nvalues) return fail(err, err_size, "%s: values on a non-list type", d->key);
    int automatic = 0;
    for (int k = 0; k < CD_OPT_NDEF; k++) {
      if (!allowed_value(d, d->def[k]))
        return fail(err, err_size, "%s: default %u is not an allowed value", d->key, (unsigned)d->def[k]);
      automatic |= d->def[k] == CD_OPT_AUTO;
    }
    if (automatic && !d->rule) return fail(err, err_size, "%s: an automatic default needs a rule", d->key);
  }
  for (size_t e = 0; e < cd_opt_env_doc_count; e++) {
    const cd_opt_env_doc *v = &cd_opt_env_docs[e];
    if (!v->name || !v->value || !v->when || !v->doc) return fail(err, err_size, "variable %zu: a field missing", e);
    if (var_declared_before(v->name, CD_OPT_COUNT, CD_OPT_FAM_COUNT, e))
      return fail(err, err_size, "%s declared twice", v->name);
  }
  return 0;
}

/* ------------------------------------------------------------------ documentation */

/* A default in the documentation: the four cases folded where they agree. */
static void default_doc(const cd_opt_decl *d, char *buf, size_t size) {
  char v[CD_OPT_NDEF][32];
  for (int k = 0; k < CD_OPT_NDEF; k++) value_text(d, d->def[k], v[k], sizeof v[k]);
  const int by_class = strcmp(v[CD_OPT_CPU_F32], v[CD_OPT_GPU_F32]) || strcmp(v[CD_OPT_CPU_16], v[CD_OPT_GPU_16]);
  const int by_storage = strcmp(v[CD_OPT_CPU_F32], v[CD_OPT_CPU_16]) || strcmp(v[CD_OPT_GPU_F32], v[CD_OPT_GPU_16]);
  if (!by_class && !by_storage) snprintf(buf, size, "%s", v[0]);
  else if (!by_storage) snprintf(buf, size, "CPU %s, GPU %s", v[CD_OPT_CPU_F32], v[CD_OPT_GPU_F32]);
  else if (!by_class) snprintf(buf, size, "f32 %s, 16-bit %s", v[CD_OPT_CPU_F32], v[CD_OPT_CPU_16]);
  else
    snprintf(buf, size, "CPU f32 %s, 16-bit %s; GPU f32 %s, 16-bit %s", v[CD_OPT_CPU_F32], v[CD_OPT_CPU_16],
             v[CD_OPT_GPU_F32], v[CD_OPT_GPU_16]);
}

void cd_opt_markdown(FILE *out) {
  fputs("# Tuning and environment\n\n"
        "<!-- Generated from src/options/table.c by `cmake --build build --target tuning-doc`; do not edit. -->\n\n"
        "Every knob of the library is declared once, in its option registry (`src/options/table.c`), and this page "
        "is generated from it (a test fails when it is stale).\n\n"
        "A context reads these variables once, when it is created; a value that does not parse or is not one of the "
        "allowed values fails the creation with `CAMDELTA_ERROR_INVALID_ARGUMENT` and a message naming the variable. "
        "Nothing reads the environment on the call path.\n\n"
        "The knobs come in families. `camdelta_tune_set(ctx, \"FAMILY\", \"KEY=V,KEY=V\")` replaces a family's values "
        "for one context, over the environment's: keys not given return to their defaults, and `NULL` or `\"\"` "
        "restores every default. `camdelta_tune_get(ctx, \"FAMILY\", D, buf, size)` shows the values in use and "
        "where they come from. A family's list variable holds `KEY=V,KEY=V` for its keys without a variable of their "
        "own.\n\n"
        "Defaults differ by device class (CPU; GPU or accelerator) and storage (f32; 16-bit f16 and bf16) where the "
        "table says so; `auto` is decided per call, as the key's description says.\n\n",
        out);
  fputs("## Families\n\n", out);
  for (int f = 0; f < CD_OPT_FAM_COUNT; f++) {
    const cd_opt_family *fm = &cd_opt_families[f];
    fprintf(out, "### `%s`: %s\n\n", fm->name, fm->doc);
    if (fm->process)
      fputs("Process-wide: read once per process, the first time it is needed; not set per context.\n\n", out);
    if (fm->env && cd_opt_family_env_shared((cd_opt_family_id)f))
      fprintf(out, "List variable: `%s`, shared: `%s:KEY=V,...;OTHER:KEY=V,...`.\n\n", fm->env, fm->name);
    else if (fm->env)
      fprintf(out, "List variable: `%s`.\n\n", fm->env);
    fputs("| key | variable | values | default | meaning |\n|---|---|---|---|---|\n", out);
    for (int i = 0; i < CD_OPT_COUNT; i++) {
      const cd_opt_decl *d = &cd_opt_decls[i];
      if ((int)d->family != f || d->hidden) continue;
      char allowed[256], def[192];
      allowed_text(d, allowed, sizeof allowed);
      default_doc(d, def, sizeof def);
      fprintf(out, "| `%s` | %s%s%s | %s | %s | %s", d->key, d->env ? "`" : "", d->env ? d->env : fm->env ? "(list)" : "",
              d->env ? "`" : "", allowed, def, d->doc);
      if (d->rule) fprintf(out, "; `auto`: %s", d->rule);
      fputs(" |\n", out);
    }
    fputs("\n", out);
  }
  fputs("## Other environment variables\n\n| variable | value | read | meaning |\n|---|---|---|---|\n", out);
  for (size_t e = 0; e < cd_opt_env_doc_count; e++) {
    const cd_opt_env_doc *v = &cd_opt_env_docs[e];
    fprintf(out, "| `%s` | %s | %s | %s |\n", v->name, v->value, v->when, v->doc);
  }
}
