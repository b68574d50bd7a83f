// config.h — every setting of a run: the JSON config (DeepSpeed-like keys, SPEC §7)
// with command-line flags layered on top, validated once.
#pragma once
#include <stdint.h>

typedef struct {
    // model (SPEC §2); JSON section "model"
    int vocab_size;      // V (256 = bytes; 50257 = GPT-2 BPE)
    int n_positions;     // T_max
    int n_embd;          // d
    int n_layer;         // L
    int n_head;
    int n_inner;         // f (0 in JSON = 4d)
    // moe (SPEC §2); JSON section "moe"
    int num_experts;     // E (1 = dense GPT)
    int top_k;
    int moe_every;
    float capacity_factor; // <= 0: dropless
    int min_capacity;
    int group_size;      // sequences per routing group
    float aux_coef;
    float z_coef;
    // the routing family and expert kinds (SPEC §6.5); JSON section "moe"
    int router;          // ROUTER_* ("topk", "noisy_topk", "switch", "gshard", "expert_choice")
    int use_rts;         // random token selection for capacity slots
    float jitter_eps;    // switch: router input × U(1-eps, 1+eps) in training
    float importance_coef, load_coef;   // noisy_topk: CV² losses
    float bias_update_rate;             // aux-loss-free balancing γ (0: off)
    int num_groups, topk_groups;        // group-limited routing
    int shared_experts;  // always-on FFN of n·expert_inner hidden units (0: none)
    int expert_inner;    // f_e (0 = n_inner)
    int expert_type;     // EXPERT_* ("gelu", "swiglu")
} ModelConfig;

enum { ROUTER_TOPK, ROUTER_NOISY_TOPK, ROUTER_SWITCH, ROUTER_GSHARD, ROUTER_EXPERT_CHOICE, ROUTER_KINDS };
enum { EXPERT_GELU, EXPERT_SWIGLU, EXPERT_KINDS };
extern const char *const router_names[ROUTER_KINDS];
extern const char *const expert_type_names[EXPERT_KINDS];

typedef struct {
    ModelConfig model;
    // training (SPEC §3)
    int seq_len;          // T ("seq_len"; 0 = n_positions)
    int micro_batch;      // "train_micro_batch_size_per_gpu"
    int grad_accum;       // "gradient_accumulation_steps"
    int steps;            // "train_steps" / --steps
    float lr, min_lr;     // optimizer.params.lr, scheduler.params.min_lr (resolved: lr/10
                          // unless given, kept up to date as lr changes)
    int min_lr_set;       // min_lr was given in the JSON or by --min-lr
    int warmup;           // scheduler.params.warmup_num_steps
    float beta1, beta2, eps, weight_decay; // optimizer.params
    float clip;           // "gradient_clipping" (<= 0: off)
    uint64_t seed;
    int data_sequential;  // --data-order sequential|shuffled
    int zero_stage;       // zero_optimization.stage (1)
    int bf16, fp16;       // later issues; refused when set for now
    int activation_checkpointing;
    int dtd;              // duplicate token dropping (SPEC §5); "dtd" / --dtd
    int cac;              // communication-aware checkpointing (SPEC §5); "cac" / --cac
    long tile_size;       // tiled optimizer: elements per tile; optimizer.tile_size / --tile-size
    // parallel layout (SPEC §4)
    int tp, ep;
    // I/O
    char data[1024];      // --data
    char log[1024];       // --log FILE.jsonl
    char save[1024];      // --save DIR
    int save_every;
    char resume[1024];    // --resume DIR
    int eval_every;       // 0 = only at the end
    int eval_windows;     // windows of the validation split per evaluation; 0 = all
    int log_every;        // progress line every N steps (terminal)
    int sample_every;     // print a sample every N steps (0 = never)
    int threads;          // OpenMP threads (0 = default)
    int device;           // 0 cpu, 1 cuda (--device)
} Config;

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
// Writes the flat model+moe keys (and seq_len) as a JSON object — a checkpoint's config.json.
char *config_model_json(const Config *c);
// Reads a checkpoint's config.json (flat model and moe keys) into c->model and c->seq_len.
int config_load_model_json(Config *c, const char *path);
// Prints the help of `ted train` (every option).
void config_print_train_help(void);
// Derived values.
static inline int cfg_ffn(const ModelConfig *m) { return m->n_inner > 0 ? m->n_inner : 4 * m->n_embd; }
static inline int cfg_expert_inner(const ModelConfig *m) { return m->expert_inner > 0 ? m->expert_inner : cfg_ffn(m); }
static inline int cfg_is_moe(const ModelConfig *m, int layer) {
    return m->num_experts > 1 && (layer + 1) % m->moe_every == 0;
}
