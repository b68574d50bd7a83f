// config.h — every setting of a run: the JSON config (DeepSpeed-like keys, design §7) with
// command-line flags layered on top, resolved once (resolve.c) and validated. The files of this
// room: defaults.c, json_keys.c + json.c (the training JSON), flags.c, flat.c (a checkpoint's
// config.json), settings.c (every setting as text, and where it came from), validate.c,
// resolve.c (the order), sparse_config.c; tables.h is what they share.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "config/sparse_config.h"
#include "core/alloc.h"
#include "core/precision.h"

typedef struct {
    // model (design §2); JSON section "model"
    int vocab_size;    // V (256 = bytes; 50257 = GPT-2 BPE)
    int n_positions;   // T_max
    int n_embd;        // d
    int n_layer;       // L
    int n_head;
    int n_inner;   // f (0 in JSON = 4d)
    // moe (design §2); JSON section "moe"
    int num_experts;   // E (1 = dense GPT)
    int top_k;
    int moe_every;
    float capacity_factor;   // <= 0: dropless
    int min_capacity;
    int group_size;   // sequences per routing group
    float aux_coef;
    float z_coef;
    // the routing family and expert kinds (design); JSON section "moe"
    int router;                         // ROUTER_* ("topk", "noisy_topk", "switch", "gshard", "expert_choice")
    int use_rts;                        // random token selection for capacity slots
    float jitter_eps;                   // switch: router input × U(1-eps, 1+eps) in training
    float importance_coef, load_coef;   // noisy_topk: CV² losses
    float bias_update_rate;             // aux-loss-free balancing γ (0: off)
    int num_groups, topk_groups;        // group-limited routing
    int shared_experts;                 // always-on FFN of n·expert_inner hidden units (0: none)
    int expert_inner;                   // f_e (0 = n_inner)
    int expert_type;                    // EXPERT_* ("gelu", "swiglu")
    int topk_renorm;          // topk/mixtral: the router's renormalisation of the k gates (1), or none: gates = p (0)
    int shared_expert_gate;   // the shared expert's output × sigmoid(x·w), w [1, d] (Qwen2-MoE's shared_expert_gate)
    // the block family (docs/llama.md); JSON section "model"
    int arch;                  // ARCH_GPT2 (design §2) or ARCH_LLAMA (docs/llama.md)
    int n_kv_head;             // llama: key/value heads (0 = n_head), dividing n_head
    float rms_norm_eps;        // llama: RMSNorm eps (1e-5)
    float rope_theta;          // llama: rotary base (10000)
    int tie_word_embeddings;   // llama: the LM head is the embedding (1) or a tensor of its own (0)
    int qkv_bias;              // llama: q, k and v projections with biases (Qwen2's attention)
} ModelConfig;

enum { PP_GPIPE, PP_1F1B, PP_INTERLEAVED };
// scheduler.type: ted's WarmupCosine (linear warm-up, cosine to min_lr at train_steps), and
// DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR with DeepSpeed's parameters and formulas.
enum { SCHED_WARMUP_COSINE, SCHED_WARMUP_LR, SCHED_WARMUP_DECAY_LR, SCHED_WARMUP_COSINE_LR, SCHED_KINDS };
extern const char *const sched_names[SCHED_KINDS];

// scheduler.params of DeepSpeed's schedulers (parallel/lr_schedule.c); warmup_num_steps is
// Config.warmup, shared with WarmupCosine.
typedef struct {
    int type;                 // SCHED_*
    float warmup_min_lr;      // WarmupLR, WarmupDecayLR (0)
    float warmup_max_lr;      // WarmupLR (< 0: optimizer lr), WarmupDecayLR (0.001)
    int warmup_linear;        // warmup_type "linear" (1) or "log" (0, DeepSpeed's default)
    int total_num_steps;      // WarmupDecayLR, WarmupCosineLR (required; 0: not given)
    float warmup_min_ratio;   // WarmupCosineLR (0)
    float cos_min_ratio;      // WarmupCosineLR (0.0001)
} SchedConfig;

// fp16 loss scaling, DeepSpeed's keys (parallel/zero.c): a static scale when loss_scale > 0,
// else dynamic from 2^initial_scale_power.
typedef struct {
    float loss_scale;             // fp16.loss_scale (0: dynamic)
    int initial_scale_power;      // 16
    int window;                   // loss_scale_window: clean steps before the scale doubles (1000)
    int hysteresis;               // overflows absorbed before the scale halves (2)
    int consecutive_hysteresis;   // a clean step refills the hysteresis (false)
    float min_scale;              // min_loss_scale (1)
} LossScaleConfig;
enum {
    ROUTER_TOPK,
    ROUTER_NOISY_TOPK,
    ROUTER_SWITCH,
    ROUTER_GSHARD,
    ROUTER_EXPERT_CHOICE,
    ROUTER_MIXTRAL,
    ROUTER_KINDS
};
enum { ARCH_GPT2, ARCH_LLAMA, ARCH_KINDS };
extern const char *const arch_names[ARCH_KINDS];
enum { EXPERT_GELU, EXPERT_SWIGLU, EXPERT_KINDS };
extern const char *const router_names[ROUTER_KINDS];
extern const char *const expert_type_names[EXPERT_KINDS];

typedef struct {
    ModelConfig model;
    // training (design §3)
    int seq_len;                // T ("seq_len"; 0 = n_positions)
    int micro_batch;            // "train_micro_batch_size_per_gpu"
    int grad_accum;             // "gradient_accumulation_steps"
    int steps;                  // "train_steps" / --steps
    float lr, min_lr;           // optimizer.params.lr, scheduler.params.min_lr (resolved: lr/10
                                // unless given, kept up to date as lr changes)
    int min_lr_set;             // min_lr was given in the JSON or by --min-lr
    int warmup;                 // scheduler.params.warmup_num_steps
    SchedConfig sched;          // scheduler.type and DeepSpeed's scheduler.params
    LossScaleConfig scaler;     // fp16's loss-scaler keys
    int wall_clock_breakdown;   // "wall_clock_breakdown": the time split every log_every steps and at the end
    // live metrics (io/monitor.c): DeepSpeed's "tensorboard" and "csv_monitor" sections (files in
    // output_path/job_name), Megatron's --tensorboard-dir (the folder itself)
    int tb_enabled, csv_enabled;
    char tb_path[512], tb_job[128], csv_path[512], csv_job[128];
    char tensorboard_dir[1024];
    float beta1, beta2, eps, weight_decay;   // optimizer.params
    float clip;                              // "gradient_clipping" (<= 0: off)
    uint64_t seed;
    int data_sequential;       // --data-order sequential|shuffled
    int zero_stage;            // zero_optimization.stage (1); --zero-stage
    long reduce_bucket_size;   // zero_optimization.reduce_bucket_size: stage-2 bucket elements (5e8)
    int overlap_comm;          // zero_optimization.overlap_comm: reductions during the backward, prefetched gathers (0)
    int offload;               // zero_optimization.offload_optimizer.device: 1 = "cpu", 0 = "none"
    int onebit;                // optimizer.type "OneBitAdam" (docs/parallel.md)
    int adam_named;            // optimizer.type "Adam": DeepSpeed's Adam, which is AdamW unless adam_w_mode is false
    int adam_w_mode;           // optimizer.params.adam_w_mode (true); false with "Adam": L2-coupled decay (refused
                               // when weight_decay > 0: ted has AdamW's decoupled decay only)
    int freeze_step;           // optimizer.params.freeze_step: 1-bit Adam's exact warm-up steps
    int compression;           // optimizer.params.compression: 1 = "sign" (default), 0 = "none"
    int bf16, fp16;            // bf16.enabled, fp16.enabled (at most one): cfg_precision
    int activation_checkpointing;
    int dtd;               // duplicate token dropping (design §5); "dtd" / --dtd
    int cac;               // communication-aware checkpointing (design §5); "cac" / --cac
    int overlap_degree;    // moe.overlap_degree / --overlap-degree: chunks of the EP exchange (1: none)
    int progress_thread;   // moe.progress_thread / --progress-thread: a thread moves the chunks' messages
    long tile_size;        // tiled optimizer: elements per tile; optimizer.tile_size / --tile-size
    // parallel layout (design §4)
    int tp, ep;
    // pipeline parallelism (design §6): "pp", "pipeline" section
    int pp;                // stages
    int pp_schedule;       // PP_GPIPE, PP_1F1B (default), PP_INTERLEAVED
    int pp_virtual;        // chunks per stage (interleaved)
    int pp_nlayers;        // entries of pipeline.layers (0: split evenly)
    int pp_auto;           // pipeline.layers "auto": the trainer sets pp_layers to the split that
                           // balances the stages' model FLOPs (perf/balance.c)
    int pp_layers[256];    // blocks per chunk, in chunk order
    SparseConfig sparse;   // "sparse_attention" (design): block-sparse attention layouts
    // I/O
    char data[1024];   // --data
    char log[1024];    // --log FILE.jsonl
    char save[1024];   // --save DIR
    int save_every;
    char resume[1024];      // --resume DIR
    char init_from[1024];   // --init-from DIR: weights only (a ted or Hugging Face folder), fresh optimizer, step 0
    int eval_every;         // 0 = only at the end
    int eval_windows;       // windows of the validation split per evaluation; 0 = all
    int log_every;          // progress line every N steps (terminal); DeepSpeed's "steps_per_print"
    int sample_every;       // print a sample every N steps (0 = never)
    int threads;            // OpenMP threads (0 = default)
    Device device;          // DEV_CPU or DEV_CUDA (--device)
    float peak_tflops;      // --peak-tflops: the MFU peak per process (0: measured)
    int train_batch_size;   // DeepSpeed's global batch; 0 = not given (checked = mb·accum·dp)
    // trust (io/savedir.c, core/watchdog.c, io/tensorlog.c)
    int keep_last;                   // --keep-last N: keep the N newest checkpoints (0: all)
    int overwrite;                   // --overwrite: take over a --save folder / --log of another run
    int watchdog;                    // --watchdog SECONDS: a collective that takes longer ends the job (0: off)
    int log_tensors;                 // --log-tensors: per-tensor gradient norms and expert loads in the log
    float debug_expert_grad_scale;   // --debug-expert-grad-scale X: a deliberate bug for `ted compare`'s test (1: off)
    // --dry-run: checked and planned, not trained (run/prepare.c)
    int dry_run;
    int dry_run_ranks;   // --ranks N: the processes a dry run checks the layout for (0: those it runs on)
} Config;

// A run's configuration, resolved once in a fixed order, each layer above the one before:
//   defaults(c) → the checkpoint's model (ck: --resume, --init-from) → the --config JSON →
//   the flags → the derived values (config_derive) → the rules (config_validate).
// A model key that the JSON or a flag gives must equal the checkpoint's (one line naming every
// key that differs); where each setting came from is kept (config_origin). The caller reads the
// checkpoint (its folder resolved, its config.json) once and hands it over, or NULL.
typedef struct {
    const char *opt;   // the flag that named it: "--resume" or "--init-from"
    const char *dir;   // the folder resolved
    Config cfg;        // its model, seq_len and sparse_attention (io/ckpt_meta.h: ckpt_read_config)
} ConfigCheckpoint;
int config_resolve(Config *c, int argc, char **argv, void (*defaults)(Config *), const ConfigCheckpoint *ck);
// The derived values: min_lr = lr/10 unless given, seq_len 0 = n_positions, cac implies
// activation checkpointing, DeepSpeed's schedulers warm up over 1000 steps unless told.
void config_derive(Config *c);
// The value of the last flag --name in argv ("--name V" or "--name=V"), or NULL.
const char *config_flag_value(int argc, char **argv, const char *name);
// Where the value of setting i (config_each_setting's order) came from, after config_resolve:
// 'd' default, 'j' the JSON, 'f' a flag, 'c' the checkpoint.
enum { CONFIG_MAX_SETTINGS = 192 };
char config_origin(int i);
void config_set_origin(int i, char from);
void config_origins_clear(void);

// Defaults (the values a run gets with neither JSON nor flags).
void config_defaults(Config *c);
// Reads a JSON config file into c (on top of what c holds). Unknown keys, wrong types
// and malformed JSON are errors. Returns 0, or -1 after printing one line naming the file.
int config_load_json(Config *c, const char *path);
// Applies the flags of `ted train` (argv[i] from i = first). Returns 0, or -1 after
// printing one line naming the flag and the problem.
int config_apply_flags(Config *c, int argc, char **argv, int first);
// Checks every rule (k <= E, n_head | d, T <= n_positions, ...). Returns 0 or -1 after one line.
int config_validate(const Config *c);
// The same rules without a word: 0, or -1 with the first broken rule in why (n bytes, the text
// config_validate prints after "invalid config: "). Nothing is printed, allocated or changed, so
// that a caller may ask about many candidate configs (ted tune). The rules that depend on whether
// a key was given read the keys given since the last config_defaults (config_given).
int config_check(const Config *c, char *why, size_t n);
// The start-up lines of a valid config (out NULL: none): one warning per switched-off feature whose
// keys were given (JSON or flags since config_defaults), naming them and why they have no effect
// (moe.* on a dense model, freeze_step under AdamW, fp16.* with fp16 off, ...), one per DeepSpeed
// key accepted without effect whose value asks for something ted does not do, and a note when the
// warm-up is longer than the run.
void config_warn(const Config *c, FILE *out);
// Writes the flat model+moe keys (and seq_len) as a JSON object — a checkpoint's config.json
// holds them so, at its top level (design §7), beside the Hugging Face keys of io/hfconfig.c.
char *config_model_json(const Config *c);
// The object in which checkpoints of an earlier version kept ted's keys other than GPT-2's shape
// keys; still read, never written.
#define CONFIG_TED_SECTION "ted"
// Reads a checkpoint's config.json (flat model and moe keys, or the same split between the
// top level and CONFIG_TED_SECTION) into c->model and c->seq_len.
int config_load_model_json(Config *c, const char *path);
// The same from the text of such a JSON object; path names it in messages.
int config_load_model_text(Config *c, const char *text, const char *path);
// "gpipe" / "1f1b" / "interleaved" → PP_*, or -1.
int config_pp_schedule(const char *name);
// Calls fn for every setting (name = the flag without "--", or the JSON key for JSON-only
// ones), with its JSON key (NULL: flag only), its value in c as text, and the value's JSON
// type: 'n' number, 'b' bool, 's' string, 'r' raw JSON.
typedef void (*SettingFn)(void *ctx, const char *name, const char *json, const char *value, char type);
void config_each_setting(const Config *c, SettingFn fn, void *ctx);
// The same gathered: every setting as text, in that order (json "" for flag-only settings).
typedef struct {
    char name[64], json[64], value[1100];
    char type;
} ConfigSetting;
typedef struct {
    ConfigSetting s[CONFIG_MAX_SETTINGS];
    int n;
} ConfigSettings;
void config_settings(const Config *c, ConfigSettings *S);
// Whether a setting is a key of the model (its JSON key in the "model" or "moe" section).
int config_is_model_key(const ConfigSetting *s);
// Prints the help of `ted train` (every option).
void config_print_train_help(void);
// Derived values: each has one accessor.
// T: tokens per training sequence (seq_len, 0 = n_positions).
static inline int cfg_seq_len(const Config *c) { return c->seq_len > 0 ? c->seq_len : c->model.n_positions; }
// The storage format of weights, activations and gradients (bf16.enabled, fp16.enabled).
static inline Precision cfg_precision(const Config *c) { return c->bf16 ? PREC_BF16 : c->fp16 ? PREC_FP16 : PREC_FP32; }
// Sequences per optimizer step over dp data-parallel ranks.
static inline long cfg_global_batch(const Config *c, int dp) { return (long)c->micro_batch * c->grad_accum * dp; }
// Chunks of the model's blocks over the pipeline: pp stages x virtual stages.
static inline int cfg_chunks(const Config *c) { return c->pp * (c->pp_virtual > 0 ? c->pp_virtual : 1); }
static inline int cfg_ffn(const ModelConfig *m) { return m->n_inner > 0 ? m->n_inner : 4 * m->n_embd; }
static inline int cfg_expert_inner(const ModelConfig *m) { return m->expert_inner > 0 ? m->expert_inner : cfg_ffn(m); }
// A llama MoE with shared experts is named in Qwen2-MoE's layout (mlp.gate, mlp.experts.E.*_proj,
// mlp.shared_expert.*, mlp.shared_expert_gate), any other llama MoE in Mixtral's (docs/llama.md).
static inline int cfg_qwen_layout(const ModelConfig *m) {
    return m->arch == ARCH_LLAMA && m->num_experts > 1 && m->shared_experts > 0;
}
static inline int cfg_kv_heads(const ModelConfig *m) { return m->n_kv_head > 0 ? m->n_kv_head : m->n_head; }
static inline int cfg_is_llama(const ModelConfig *m) { return m->arch == ARCH_LLAMA; }
static inline int cfg_is_moe(const ModelConfig *m, int layer) {
    return m->num_experts > 1 && (layer + 1) % m->moe_every == 0;
}
