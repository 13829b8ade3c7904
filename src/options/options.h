/* The option registry: every tuning knob of the library declared once, as data (table.c): its family, key,
 * environment variable, type, allowed values, default per device class and storage, and a one-line doc.
 *
 * - A context reads the environment through it once, at creation (cd_opt_read_env), into its cd_opt_values;
 *   nothing reads the environment on the call path. Process-wide families (the MPI component's) are read once per
 *   process instead (cd_opt_process).
 * - camdelta_tune_set / camdelta_tune_get reach the same values by family and key (cd_opt_set_family,
 *   cd_opt_describe_family).
 * - docs/tuning.md is generated from the table (cd_opt_markdown; a test fails when the committed file is stale).
 *
 * Keys are set by family: the family's list variable holds "KEY=V,KEY=V" for its keys without a variable of their
 * own (a variable several families share holds "family:KEY=V,...;family:KEY=V,..."), and camdelta_tune_set(ctx, family, "KEY=V,...") replaces the whole family's values for one context (keys not
 * given return to their defaults, over the environment).
 *
 * Declaring a knob: an id in cd_opt_id (its family's block), its entry in table.c (designated initialisers, indexed
 * by the id), then read it where the operation plans with cd_option(ctx, id, dtype) (runtime/internal.h): the value
 * set, else the declared default for the context's device class and the call's storage, or CD_OPT_AUTO where the
 * operation decides per call (the entry's `rule` says how). A new family: an id in cd_opt_family_id and its entry.
 *
 * A leaf: this folder calls nothing else of the library (messages are written to the caller's buffer), so the
 * runtime, the operations, the MPI component and the documentation generator can all use it. */
#ifndef CAMDELTA_OPTIONS_H
#define CAMDELTA_OPTIONS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** Families: camdelta_tune_set's first argument. */
typedef enum cd_opt_family_id {
  CD_OPT_FAM_PREP,     /* "prep": the prep forward */
  CD_OPT_FAM_PREP_BWD, /* "prep_backward": the prep backward */
  CD_OPT_FAM_CONV,     /* "conv": the short convolution */
  CD_OPT_FAM_OUTPUT,   /* "output": the output transform */
  CD_OPT_FAM_SCAN,     /* "scan": the scan's arithmetic path */
  CD_OPT_FAM_CHUNKWISE,  /* "chunkwise": the chunkwise forward's FMA tiles */
  CD_OPT_FAM_BACKWARD,   /* "backward": the scan backward's FMA tiles */
  CD_OPT_FAM_SEQUENTIAL, /* "sequential": the sequential forward's tiles */
  CD_OPT_FAM_TC_GRAM,    /* "gram": the tensor-core gram's tiles */
  CD_OPT_FAM_TC_APPLY,   /* "apply": the tensor-core apply's tiles */
  CD_OPT_FAM_TC_FRAMES,  /* "frames": the tensor-core frames' tiles */
  CD_OPT_FAM_MPI,      /* "mpi": sequence parallelism (camdelta_mpi), process-wide */
  CD_OPT_FAM_VERBOSE,  /* "verbose": what a context prints on stderr */
  CD_OPT_FAM_COUNT
} cd_opt_family_id;

/** How many keys each tile family has (the scan checks them against its own enumerations). */
enum { CD_OPT_CHUNKWISE_KEYS = 17, CD_OPT_BACKWARD_KEYS = 9, CD_OPT_SEQUENTIAL_KEYS = 5, CD_OPT_TC_KEYS = 5 };

/** Keys, grouped by family. */
typedef enum cd_opt_id {
  CD_OPT_PREP_FORM,
  CD_OPT_PREP_TT,
  CD_OPT_PREP_WPC,
  CD_OPT_PREP_WL,
  CD_OPT_PREP_IX,
  CD_OPT_PREP_PB,
  CD_OPT_PREP_BWD_FORM,
  CD_OPT_PREP_BWD_TT,
  CD_OPT_PREP_BWD_WPC,
  CD_OPT_PREP_BWD_TS,
  CD_OPT_PREP_BWD_NU,
  CD_OPT_PREP_BWD_TW,
  CD_OPT_PREP_BWD_PB,
  CD_OPT_CONV_SB,
  CD_OPT_CONV_FORM,
  CD_OPT_OUTPUT_FORM,
  CD_OPT_SCAN_TC,
  CD_OPT_SCAN_CPU,
  /* The scan's tiles: blocks of keys in the order of the scan's own enumerations (src/scan/tiles.h, tc.h), which
   * index them from the block's first id. A value left at its default (CD_OPT_AUTO) is chosen by the tile policy. */
  CD_OPT_CHUNKWISE,                                  /* CD_ST_COUNT keys: A_WR ... C_KC */
  CD_OPT_BACKWARD = CD_OPT_CHUNKWISE + CD_OPT_CHUNKWISE_KEYS, /* CD_SB_COUNT keys: RPT ... RL CR */
  CD_OPT_SEQUENTIAL = CD_OPT_BACKWARD + CD_OPT_BACKWARD_KEYS, /* CD_SQ_COUNT keys: J TS W PF OUT */
  CD_OPT_TC_GRAM = CD_OPT_SEQUENTIAL + CD_OPT_SEQUENTIAL_KEYS, /* CD_OPT_TC_KEYS keys each: WM WN MR NR KC */
  CD_OPT_TC_APPLY = CD_OPT_TC_GRAM + CD_OPT_TC_KEYS,
  CD_OPT_TC_FRAMES = CD_OPT_TC_APPLY + CD_OPT_TC_KEYS,
  CD_OPT_MPI_CHUNK_BYTES = CD_OPT_TC_FRAMES + CD_OPT_TC_KEYS,
  CD_OPT_VERBOSE_KERNELS,
  CD_OPT_VERBOSE_SCAN,
  CD_OPT_COUNT
} cd_opt_id;

/** A default the operation decides per call (the declaration's `rule` says how). */
#define CD_OPT_AUTO UINT32_MAX

typedef enum cd_opt_type {
  CD_OPT_RANGE,  /* a whole number in [min, max], a multiple of `step` when step > 1 */
  CD_OPT_ONE_OF, /* one of values[0..nvalues), or its name in names[] */
  CD_OPT_FLAG    /* 0 or 1 */
} cd_opt_type;

/** Defaults by device class (CPU; GPU or accelerator) and storage (f32; 16-bit f16/bf16), indexed by
 *  cd_opt_default_index. CD_OPT_DEF(v): v everywhere; CD_OPT_DEF_CLASS(cpu, gpu); CD_OPT_DEF_STORAGE(f32, s16). */
enum { CD_OPT_CPU_F32, CD_OPT_GPU_F32, CD_OPT_CPU_16, CD_OPT_GPU_16, CD_OPT_NDEF };
#define CD_OPT_DEF(v) {(v), (v), (v), (v)}
#define CD_OPT_DEF_CLASS(cpu, gpu) {(cpu), (gpu), (cpu), (gpu)}
#define CD_OPT_DEF_STORAGE(f32, s16) {(f32), (f32), (s16), (s16)}

enum { CD_OPT_MAX_VALUES = 8 };

typedef struct cd_opt_decl {
  cd_opt_family_id family;
  const char *key; /* KEY in "KEY=V,..." */
  const char *env; /* a variable of its own holding only this value, or NULL: the family's list variable */
  cd_opt_type type;
  uint32_t min, max, step;                /* CD_OPT_RANGE (max < UINT32_MAX) */
  uint32_t values[CD_OPT_MAX_VALUES];     /* CD_OPT_ONE_OF */
  const char *names[CD_OPT_MAX_VALUES];   /* CD_OPT_ONE_OF: optional names of values[i], accepted besides the number */
  unsigned nvalues;
  uint32_t def[CD_OPT_NDEF];              /* CD_OPT_AUTO: decided per call, see rule */
  const char *rule;                       /* how an automatic default is chosen (required where def holds CD_OPT_AUTO) */
  const char *doc;                        /* one line */
  int hidden; /* no variable, not in camdelta_tune_set nor the docs: the library's tests force a code path with it */
} cd_opt_decl;

typedef struct cd_opt_family {
  const char *name; /* camdelta_tune_set's family */
  const char *env;  /* the list variable "KEY=V,..." for the keys without a variable of their own, or NULL */
  const char *doc;  /* one line */
  int process;      /* process-wide: read once per process (cd_opt_process), not per context; camdelta_tune_set
                       does not take it */
} cd_opt_family;

extern const cd_opt_family cd_opt_families[CD_OPT_FAM_COUNT];
extern const cd_opt_decl cd_opt_decls[CD_OPT_COUNT];

/** Environment variables the library reads outside the registry's families (device selection, cache, test
 *  modes): declared here so that the documentation lists every variable and a test checks that none is left out. */
typedef struct cd_opt_env_doc {
  const char *name;
  const char *value; /* what it holds, e.g. "a folder" */
  const char *when;  /* when it is read */
  const char *doc;
} cd_opt_env_doc;
extern const cd_opt_env_doc cd_opt_env_docs[];
extern const size_t cd_opt_env_doc_count;

/** Where a value came from. */
typedef enum cd_opt_source { CD_OPT_FROM_DEFAULT, CD_OPT_FROM_ENV, CD_OPT_FROM_API } cd_opt_source;

/** One context's values. Each slot is written whole (calls on other threads read it without a lock while
 *  camdelta_tune_set replaces a family); writers are serialised by the caller. Zeroed: every key at its default. */
typedef struct cd_opt_values {
  _Atomic uint32_t v[CD_OPT_COUNT];        /* 0: not set; else the value + 1 */
  _Atomic unsigned char from[CD_OPT_COUNT]; /* cd_opt_source of a set value */
} cd_opt_values;

/** Index into cd_opt_decl.def for a device class (gpu_like: GPU or accelerator) and storage (half: 16-bit). */
static inline int cd_opt_default_index(int gpu_like, int half) { return (half ? 2 : 0) + (gpu_like ? 1 : 0); }

/** Every key back at its default. */
void cd_opt_clear(cd_opt_values *o);
/** Reads every family's variables into *o (keys not given stay at their defaults). 0, or -1 with a message
 *  naming the variable in err (a value that does not parse or is outside the declared values). */
int cd_opt_read_env(cd_opt_values *o, char *err, size_t err_size);
/** Replaces family f's values with those of "KEY=V,KEY=V" (NULL or "": every key of the family at its default),
 *  marking them `from`; `who` starts the messages (e.g. "camdelta_tune_set(prep)"). All or nothing: 0, or -1 with
 *  a message in err and *o unchanged. */
int cd_opt_set_family(cd_opt_values *o, cd_opt_family_id f, const char *params, cd_opt_source from, const char *who,
                      char *err, size_t err_size);
/** A key of a process-wide family: read from its variable once per process, the first time any thread asks (the
 *  default when unset). 0 and *value, or -1 with a message naming the variable in err; every later call gives the
 *  same answer. */
int cd_opt_process(cd_opt_id id, uint32_t *value, char *err, size_t err_size);
/** Sets one key (tests, and the runtime's emulated device facts). */
void cd_opt_put(cd_opt_values *o, cd_opt_id id, uint32_t value, cd_opt_source from);
/** The value of `id`: the one set, else the default for (gpu_like, half); CD_OPT_AUTO where the operation decides. */
uint32_t cd_opt_get(const cd_opt_values *o, cd_opt_id id, int gpu_like, int half);
/** 1 when `id` was set (environment or camdelta_tune_set). */
int cd_opt_is_set(const cd_opt_values *o, cd_opt_id id);
/** Where the value of `id` came from (CD_OPT_FROM_DEFAULT when not set). */
cd_opt_source cd_opt_from(const cd_opt_values *o, cd_opt_id id);
/** The name of the source of a value of `id` for messages: its variable (or its family's list variable) when it came
 *  from the environment, "camdelta_tune_set(FAMILY)" when it came from the API. */
void cd_opt_source_name(const cd_opt_values *o, cd_opt_id id, char *buf, size_t size);
/** 1 when family f's list variable is shared with other families: its value is then
 *  "family:KEY=V,...;family:KEY=V,...". */
int cd_opt_family_env_shared(cd_opt_family_id f);
/** The next entry of a list "KEY=V,KEY=V" (commas or spaces between entries) from *p: 1 with the key's text
 *  [key, key + klen) and the value's [val, val + vlen); 0 at the end; -1 for an entry without '=' (key, klen name it).
 *  *p moves past the entry. */
int cd_opt_list_next(const char **p, const char **key, size_t *klen, const char **val, size_t *vlen);
/** 1 when `name` is a variable the registry declares (a key's, a family's list, or one read elsewhere). */
int cd_opt_declares(const char *name);
/** The family named `name`, or -1. */
int cd_opt_family_find(const char *name);
/** The names of every family, ", "-separated, for messages. */
void cd_opt_family_names(char *buf, size_t size);
/** camdelta_tune_get's text for family f on a device class: "KEY=V KEY=V ..." with each value's source, e.g.
 *  "FORM=auto TT=16 (camdelta_tune_set) WPC=64 WL=auto"; defaults that differ by storage as "8 (16-bit: 16)". */
void cd_opt_describe_family(const cd_opt_values *o, cd_opt_family_id f, int gpu_like, char *buf, size_t size);
/** Checks the table itself: every entry's family, key, type, values and defaults consistent (a default outside
 *  the allowed values, an automatic default without a rule, two keys alike in a family, a variable declared
 *  twice). 0, or -1 with the first fault in err. */
int cd_opt_check_table(char *err, size_t err_size);
/** Writes docs/tuning.md. */
void cd_opt_markdown(FILE *out);

#endif
