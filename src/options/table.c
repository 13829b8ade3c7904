/* The declarations: every knob of the library, every environment variable it reads. docs/tuning.md is generated
 * from this file (src/options/gen/tuning_md.c); edit here, then `cmake --build build --target tuning-doc`. */
#include "options/options.h"

const cd_opt_family cd_opt_families[CD_OPT_FAM_COUNT] = {
    [CD_OPT_FAM_PREP] = {.name = "prep", .env = "CAMDELTA_PREP_TILES", .doc = "the prep forward (camdelta_prep_forward)"},
    [CD_OPT_FAM_PREP_BWD] = {.name = "prep_backward",
                             .env = "CAMDELTA_PREP_BWD_TILES",
                             .doc = "the prep backward (camdelta_prep_backward)"},
    [CD_OPT_FAM_CONV] = {.name = "conv", .env = NULL, .doc = "the short convolution on raw K (camdelta_short_conv_*)"},
    [CD_OPT_FAM_OUTPUT] = {.name = "output",
                           .env = NULL,
                           .doc = "the output transform (camdelta_output_transform_*, the camera branch's)"},
    [CD_OPT_FAM_SCAN] = {.name = "scan", .env = NULL, .doc = "the scan (camdelta_scan_*, the camera branch's scans)"},
    [CD_OPT_FAM_CHUNKWISE] = {.name = "chunkwise",
                              .env = "CAMDELTA_SCAN_TILES",
                              .doc = "the chunkwise forward's FMA tiles (cl/scan_chunkwise.cl: phases A, B, C)"},
    [CD_OPT_FAM_BACKWARD] = {.name = "backward",
                             .env = "CAMDELTA_SCAN_BWD_TILES",
                             .doc = "the scan backward's FMA tiles (cl/scan_backward.cl)"},
    [CD_OPT_FAM_SEQUENTIAL] = {.name = "sequential",
                               .env = "CAMDELTA_SEQ_TILES",
                               .doc = "the sequential forward's tiles (cl/scan_sequential.cl)"},
    [CD_OPT_FAM_TC_GRAM] = {.name = "gram",
                            .env = "CAMDELTA_TC_TILES",
                            .doc = "the tensor-core gram's tiles (work-group WM x WN warps, each MR x NR fragments, KC "
                                   "tokens per step)"},
    [CD_OPT_FAM_TC_APPLY] = {.name = "apply",
                             .env = "CAMDELTA_TC_TILES",
                             .doc = "the tensor-core apply's tiles (outputs from the states), as `gram`"},
    [CD_OPT_FAM_TC_FRAMES] = {.name = "frames",
                              .env = "CAMDELTA_TC_TILES",
                              .doc = "the tensor-core frames kernel's tiles (the backward's per-frame gradients), as "
                                     "`gram`"},
    [CD_OPT_FAM_MPI] = {.name = "mpi",
                        .env = NULL,
                        .doc = "sequence parallelism over MPI (camdelta_mpi)",
                        .process = 1},
    [CD_OPT_FAM_VERBOSE] = {.name = "verbose", .env = NULL, .doc = "what a context prints on stderr"},
};


/* A tile of the scan: a whole number in [1, 4096] the tile policy chooses unless it is given; the kernels'
 * constraints (divisibility, work-group and local-memory limits) are checked when a plan is built, naming the
 * value's source. */
#define TILE_RULE "the tile policy (src/scan/tiles.c, tc.c) for the device and the shape; the tensor-core families " \
                  "also take the entries saved by `camdelta tune --save` and the built-in per-device table"
#define TILE(fam, k, d) \
  {.family = (fam), .key = (k), .type = CD_OPT_RANGE, .min = 1, .max = 4096, .def = CD_OPT_DEF(CD_OPT_AUTO), \
   .rule = TILE_RULE, .doc = (d)}
#define CHUNK(i, k, d) [CD_OPT_CHUNKWISE + (i)] = TILE(CD_OPT_FAM_CHUNKWISE, k, d)
#define BWD(i, k, d) [CD_OPT_BACKWARD + (i)] = TILE(CD_OPT_FAM_BACKWARD, k, d)
#define SEQ(i, k, d) [CD_OPT_SEQUENTIAL + (i)] = TILE(CD_OPT_FAM_SEQUENTIAL, k, d)
#define TC(first, fam)                                                                                                 \
  [(first) + 0] = TILE(fam, "WM", "warps along the rows"), [(first) + 1] = TILE(fam, "WN", "warps along the columns"), \
  [(first) + 2] = TILE(fam, "MR", "fragments per warp along the rows (MR*NR at most 32)"),                           \
  [(first) + 3] = TILE(fam, "NR", "fragments per warp along the columns"),                                          \
  [(first) + 4] = TILE(fam, "KC", "contraction elements per step, a multiple of 8")

/* An operation's choice between its work-group form (0) and its CPU form (1, the default on CPU devices). */
#define CPU_FORM(fam, var, d)                                                                                     \
  {.family = (fam), .key = "FORM", .env = (var), .type = CD_OPT_ONE_OF, .values = {0, 1}, .nvalues = 2,          \
   .def = CD_OPT_DEF_CLASS(1, 0), .doc = (d)}

const cd_opt_decl cd_opt_decls[CD_OPT_COUNT] = {
    [CD_OPT_PREP_FORM] = {.family = CD_OPT_FAM_PREP,
                          .key = "FORM",
                          .env = "CAMDELTA_PREP_FUSED",
                          .type = CD_OPT_ONE_OF,
                          .values = {0, 1, 2, 3},
                          .nvalues = 4,
                          .def = CD_OPT_DEF_CLASS(3, CD_OPT_AUTO),
                          .rule = "2 up to 48 heads, else 1",
                          .doc = "0 two passes (the inverse RMS, then the per-head kernel); 1 one pass, a work-group "
                                 "per tile of all heads, reading q and k twice; 2 one pass, a work-group holding one "
                                 "tensor's rows of all heads in registers (up to 64 heads; past them 1 runs); 3 one "
                                 "pass, one work-item per PB blocks of 8 tokens of all heads in explicit vectors (CPUs)"},
    [CD_OPT_PREP_TT] = {.family = CD_OPT_FAM_PREP,
                        .key = "TT",
                        .type = CD_OPT_ONE_OF,
                        .values = {4, 8, 16},
                        .nvalues = 3,
                        .def = CD_OPT_DEF_STORAGE(8, 16),
                        .doc = "tokens per tile of the one-pass forms (halved while the device or the built kernel "
                               "cannot take TT·D/4 work-items)"},
    [CD_OPT_PREP_WPC] = {.family = CD_OPT_FAM_PREP,
                         .key = "WPC",
                         .type = CD_OPT_RANGE,
                         .min = 1,
                         .max = 4096,
                         .def = CD_OPT_DEF(64),
                         .doc = "work-groups per compute unit of form 1 (they walk the tiles persistently)"},
    [CD_OPT_PREP_WL] = {.family = CD_OPT_FAM_PREP,
                        .key = "WL",
                        .type = CD_OPT_ONE_OF,
                        .values = {1, 2, 3},
                        .nvalues = 3,
                        .def = CD_OPT_DEF(CD_OPT_AUTO),
                        .rule = "2 in 16-bit storage from D = 96, else 3",
                        .doc = "where form 2 reads the norm weights: 1 in the loop over the heads, 2 applied to the "
                               "rows before the work-group's barrier, 3 staged in local memory (1 where they do not "
                               "fit it)"},
    [CD_OPT_PREP_IX] = {.family = CD_OPT_FAM_PREP,
                        .key = "IX",
                        .type = CD_OPT_ONE_OF,
                        .values = {32, 64},
                        .nvalues = 2,
                        .def = CD_OPT_DEF(32),
                        .doc = "index width of form 2: 32 bits where the call's indices fit them; 64 runs the form "
                               "that larger calls take on any call (the tests)",
                        .hidden = 1},
    [CD_OPT_PREP_PB] = {.family = CD_OPT_FAM_PREP,
                        .key = "PB",
                        .type = CD_OPT_ONE_OF,
                        .values = {1, 2, 4, 8, 16, 32},
                        .nvalues = 6,
                        .def = CD_OPT_DEF(8),
                        .doc = "blocks of 8 tokens per work-item of form 3 (halved while the device's local memory "
                               "cannot hold their tables, and under a driver's loop budget until a work-item's loops "
                               "fit it; where one block does not, the GPU forms run)"},
    [CD_OPT_PREP_BWD_FORM] = {.family = CD_OPT_FAM_PREP_BWD,
                              .key = "FORM",
                              .env = "CAMDELTA_PREP_BWD_FUSED",
                              .type = CD_OPT_ONE_OF,
                              .values = {0, 1, 2},
                              .nvalues = 3,
                              .def = CD_OPT_DEF_CLASS(2, 1),
                              .doc = "0 three kernels; 1 two passes (the RMSNorm sums per token and head, then the "
                                     "gradients; calls asking for dproj_* or drope_* run 0); 2 one pass, one "
                                     "work-item per PB blocks of 8 tokens of all heads in explicit vectors, then the "
                                     "sums of the norm weights and RoPE tables (CPUs; a driver with a loop budget "
                                     "runs 0)"},
    [CD_OPT_PREP_BWD_TT] = {.family = CD_OPT_FAM_PREP_BWD,
                            .key = "TT",
                            .type = CD_OPT_ONE_OF,
                            .values = {4, 8, 16},
                            .nvalues = 3,
                            .def = CD_OPT_DEF(16),
                            .doc = "tokens per tile of pass 2 (halved while the device or the built kernel cannot "
                                   "take the work-group)"},
    [CD_OPT_PREP_BWD_WPC] = {.family = CD_OPT_FAM_PREP_BWD,
                             .key = "WPC",
                             .type = CD_OPT_RANGE,
                             .min = 1,
                             .max = 4096,
                             .def = CD_OPT_DEF_STORAGE(24, 32),
                             .doc = "pass 2's work-groups per compute unit (and so the rows of norm-weight partials)"},
    [CD_OPT_PREP_BWD_TS] = {.family = CD_OPT_FAM_PREP_BWD,
                            .key = "TS",
                            .type = CD_OPT_ONE_OF,
                            .values = {32, 64, 128, 256},
                            .nvalues = 4,
                            .def = CD_OPT_DEF(64),
                            .doc = "tokens per work-group of pass 1"},
    [CD_OPT_PREP_BWD_NU] = {.family = CD_OPT_FAM_PREP_BWD,
                            .key = "NU",
                            .type = CD_OPT_ONE_OF,
                            .values = {1, 2, 4},
                            .nvalues = 3,
                            .def = CD_OPT_DEF_STORAGE(2, 1),
                            .doc = "work-groups per tile and head of pass 2, each taking D/4/NU of the head's "
                                   "4-channel units (one that does not divide D/4 runs as 1)"},
    [CD_OPT_PREP_BWD_TW] = {.family = CD_OPT_FAM_PREP_BWD,
                            .key = "TW",
                            .type = CD_OPT_ONE_OF,
                            .values = {1, 3},
                            .nvalues = 2,
                            .def = CD_OPT_DEF_STORAGE(3, 1),
                            .doc = "tensors written per work-group of pass 2: 3 dq_raw, dk_raw and dv_raw together, "
                                   "1 one each (three times the work-groups, fewer registers)"},
    [CD_OPT_PREP_BWD_PB] = {.family = CD_OPT_FAM_PREP_BWD,
                            .key = "PB",
                            .type = CD_OPT_ONE_OF,
                            .values = {1, 2, 4, 8, 16, 32},
                            .nvalues = 6,
                            .def = CD_OPT_DEF(8),
                            .doc = "blocks of 8 tokens per work-item of form 2 (halved while the device's local "
                                   "memory cannot hold their tables and sums)"},
    [CD_OPT_CONV_SB] = {.family = CD_OPT_FAM_CONV,
                        .key = "SB",
                        .env = "CAMDELTA_CONV_SB",
                        .type = CD_OPT_RANGE,
                        .min = 1,
                        .max = 64,
                        .def = CD_OPT_DEF_CLASS(8, 4),
                        .doc = "spatial positions per work-item of the backward: fewer give more work-items and more "
                               "weight partials to sum"},
    [CD_OPT_CONV_FORM] = CPU_FORM(CD_OPT_FAM_CONV, "CAMDELTA_CONV_FORM",
                                  "0 a work-item per position and 4 channels (backward: per channel and SB "
                                  "positions; cl/short_conv.cl); 1 a work-item per position (backward: SB of "
                                  "them) and block of channels in float8 vectors "
                                  "(cl/branch_cpu.cl, CPUs); a driver with a loop budget (Rusticl on llvmpipe) runs 0"),
    [CD_OPT_OUTPUT_FORM] = CPU_FORM(CD_OPT_FAM_OUTPUT, "CAMDELTA_OUTPUT_FORM",
                                    "0 a work-group per tile of tokens of one head, staged in local memory "
                                    "(cl/branch.cl); 1 a work-item per 32 tokens of every head in float8 vectors and "
                                    "8 x 8 transposes (cl/branch_cpu.cl, CPUs); a driver with a loop budget (Rusticl "
                                    "on llvmpipe) runs 0"),
    [CD_OPT_SCAN_TC] = {.family = CD_OPT_FAM_SCAN,
                        .key = "TC",
                        .env = "CAMDELTA_TC",
                        .type = CD_OPT_ONE_OF,
                        .values = {0, 1, 2},
                        .names = {NULL, NULL, "emulate"},
                        .nvalues = 3,
                        .def = CD_OPT_DEF(1),
                        .doc = "the NVIDIA tensor-core path: 0 off, 1 where the device passes its feature test, "
                               "emulate its kernels with the products done through local memory, on any device "
                               "(tests)"},
    [CD_OPT_SCAN_CPU] = {.family = CD_OPT_FAM_SCAN,
                         .key = "CPU",
                         .env = "CAMDELTA_SCAN_CPU",
                         .type = CD_OPT_ONE_OF,
                         .values = {0, 1},
                         .nvalues = 2,
                         .def = CD_OPT_DEF_CLASS(1, 0),
                         .doc = "the CPU forms of the scan's phases (cl/scan_cpu.cl: a work-item per core's task, "
                                "register tiles of float8; AUTO then runs the chunkwise algorithm): 1 on CPU "
                                "devices, also on any other device (tests); 0 the work-group forms; packed clips "
                                "and the summaries keep the work-group forms, a device on the tensor-core path its "
                                "tensor cores; under a driver's loop budget (Rusticl on llvmpipe) the chains and "
                                "grams split their walks over launches, and a head dim whose one step does not fit "
                                "keeps the work-group forms"},
    CHUNK(0, "A_WR", "phase A (the grams): work-item rows of a tile"),
    CHUNK(1, "A_RM", "phase A: rows per work-item (tile rows A_WR*A_RM)"),
    CHUNK(2, "A_WC", "phase A: work-item columns of a tile"),
    CHUNK(3, "A_RN", "phase A: columns per work-item (tile columns A_WC*A_RN)"),
    CHUNK(4, "A_KC", "phase A: tokens staged in local memory per step"),
    CHUNK(5, "B_J", "phase B (the chain): value columns per work-group (at most D)"),
    CHUNK(6, "B_WR", "phase B: work-item rows (B_WR*B_RM >= D)"),
    CHUNK(7, "B_RM", "phase B: rows per work-item"),
    CHUNK(8, "B_WC", "phase B: work-item columns"),
    CHUNK(9, "B_RN", "phase B: columns per work-item"),
    CHUNK(10, "B_KC", "phase B: contraction chunk staged per step"),
    CHUNK(11, "B_PF", "phase B: chunks of A_f loaded ahead into registers (divides D / B_KC)"),
    CHUNK(12, "C_WR", "phase C (the outputs): work-item rows (value rows)"),
    CHUNK(13, "C_RM", "phase C: rows per work-item"),
    CHUNK(14, "C_WC", "phase C: work-item columns (tokens)"),
    CHUNK(15, "C_RN", "phase C: columns per work-item"),
    CHUNK(16, "C_KC", "phase C: contraction chunk (divides D)"),
    BWD(0, "RPT", "grams: rows (and columns) per work-item; work-group (D/RPT)^2"),
    BWD(1, "TSG", "grams: tokens per local chunk"),
    BWD(2, "CB", "chain: value columns per work-group"),
    BWD(3, "DPT", "frames: value columns per work-item"),
    BWD(4, "TL", "frames: token lanes; work-group TL*D/DPT"),
    BWD(5, "TPT", "frames: tokens per lane"),
    BWD(6, "MC", "frames: contraction chunk (divides D)"),
    BWD(7, "RL", "ddecay: work-group size (a power of two)"),
    BWD(8, "CR", "chain: rows per work-item (divides D; 1 unless the chain kernel's work-group limit is below D)"),
    SEQ(0, "J", "value columns per work-group (at most D)"),
    SEQ(1, "TS", "tokens per tile (at most 1024)"),
    SEQ(2, "W", "work-group size (a power of two from 32)"),
    SEQ(3, "PF", "the next tile's loads in flight during the arithmetic: 1 on, 2 off"),
    SEQ(4, "OUT", "where the outputs are computed: 1 in the kernel, 2 by the chunkwise phase C from the saved states"),
    TC(CD_OPT_TC_GRAM, CD_OPT_FAM_TC_GRAM),
    TC(CD_OPT_TC_APPLY, CD_OPT_FAM_TC_APPLY),
    TC(CD_OPT_TC_FRAMES, CD_OPT_FAM_TC_FRAMES),
    [CD_OPT_MPI_CHUNK_BYTES] = {.family = CD_OPT_FAM_MPI,
                                .key = "CHUNK_BYTES",
                                .env = "CAMDELTA_SP_CHUNK_BYTES",
                                .type = CD_OPT_RANGE,
                                .min = 4,
                                .max = 1u << 30,
                                .step = 4,
                                .def = CD_OPT_DEF(4u << 20),
                                .doc = "the largest chunk of the pipelined transfers between ranks (device reads to "
                                       "pinned memory, messages, writes); the same on every rank (checked)"},
    [CD_OPT_VERBOSE_KERNELS] = {.family = CD_OPT_FAM_VERBOSE,
                                .key = "KERNELS",
                                .env = "CAMDELTA_PROFILE_KERNELS",
                                .type = CD_OPT_FLAG,
                                .def = CD_OPT_DEF(0),
                                .doc = "1: each profiled kernel's time (a call given a camdelta_profile, as "
                                       "`camdelta bench` does)"},
    [CD_OPT_VERBOSE_SCAN] = {.family = CD_OPT_FAM_VERBOSE,
                             .key = "SCAN",
                             .env = "CAMDELTA_SCAN_VERBOSE",
                             .type = CD_OPT_FLAG,
                             .def = CD_OPT_DEF(0),
                             .doc = "1: the scan's plan at each call (algorithm, kernels, arithmetic path, tiles; the "
                                    "API is camdelta_scan_plan_describe)"},
};

const cd_opt_env_doc cd_opt_env_docs[] = {
    {.name = "CAMDELTA_DEVICE",
     .value = "`P:D`, `gpu`, `cpu`, `accelerator`, or part of a name",
     .when = "context creation",
     .doc = "the device: platform and device index from `camdelta info`, a device type, or a case-insensitive part of "
            "the platform or device name or vendor (`nvidia`, `pocl`); default the first GPU, else the first device"},
    {.name = "CAMDELTA_CACHE_DIR",
     .value = "a folder",
     .when = "each program build",
     .doc = "the kernel cache folder (default `$XDG_CACHE_HOME/camdelta`, else `~/.cache/camdelta`; created 0700; a "
            "shared sticky folder is used through its subfolder `camdelta-<uid>`)"},
    {.name = "CAMDELTA_CACHE",
     .value = "`0`",
     .when = "each program build",
     .doc = "no disk cache"},
    {.name = "CAMDELTA_KERNEL_DIR",
     .value = "a folder",
     .when = "each program build",
     .doc = "read the kernel sources from this folder instead of the copies built into the library"},
    {.name = "CAMDELTA_DEVICE_LIMITS",
     .value = "`local=BYTES,wg=ITEMS,cu=UNITS,loops=N|none,profiling=0`",
     .when = "context creation",
     .doc = "test mode: lower the local memory, work-group size and compute units the context reports (values above "
            "the device's own are ignored), emulate a driver's loop budget per work-item and launch (none: no "
            "budget, its probe not run), or a driver without kernel times ([portability.md](portability.md))"},
    {.name = "CAMDELTA_FAULT",
     .value = "`rename:K`, `kill:K`, `nolink`, comma-separated",
     .when = "each output commit of the tool's test build",
     .doc = "tests only, read by `tests/camdelta_faults` (built with `CAMDELTA_FAULT_INJECTION`), never by `camdelta`: "
            "the K-th rename of an output commit fails (EIO) or the process is killed just before it; hard links "
            "fail (EPERM)"},
};
const size_t cd_opt_env_doc_count = sizeof cd_opt_env_docs / sizeof cd_opt_env_docs[0];
