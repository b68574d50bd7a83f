// validate.c — the rules a run's configuration must keep (ranges, divisibility, the
// combinations that cannot work), the first broken rule one line naming the key; and the
// start-up warnings and notes of a valid configuration.
#include "config/tables.h"
#include "core/util.h"
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

// The first broken rule (config_check hands it over, config_validate prints it).
static char reason[512];

static void invalid(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void invalid(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
}

static int validate_routing_model(const ModelConfig *m);

// A setting as the user named it: its flag when the flag was given, else its JSON key.
static const char *named(const char *json, const char *flag) { return config_flag_given(flag + 2) ? flag : json; }

#define RULE(bad, ...)                                                                                                 \
    do {                                                                                                               \
        if (bad) {                                                                                                     \
            invalid(__VA_ARGS__);                                                                                      \
            return -1;                                                                                                 \
        }                                                                                                              \
    } while (0)

// Bounds that keep every int index and every size product of the code in range; the
// products themselves are checked in 64 bits below.
#define MAX_POSITIONS (1 << 20)
#define MAX_WIDTH (1 << 20)
#define MAX_LAYERS 4096
#define MAX_EXPERTS 65536
#define MAX_TENSORS (1L << 20)
// A step runs its micro-batches one after another before its progress line, a checkpoint or a
// stop (Ctrl-C, SIGTERM) can happen: at most this many.
#define MAX_ACCUM 65536

// The widths that size the expert tensors, named: expert_inner, and the shared expert's
// shared_experts × expert_inner hidden units, each (times n_embd) within an int tensor.
static int validate_expert_sizes(const ModelConfig *m, int64_t d, int64_t fe) {
    RULE(m->expert_inner < 0 || m->expert_inner > 4 * MAX_WIDTH, "expert_inner (%d) must be in [1, %d] (leave it out for n_inner)",
         m->expert_inner, 4 * MAX_WIDTH);
    RULE(m->shared_experts < 0, "shared_experts (%d) must be >= 0", m->shared_experts);
    int64_t fs = (int64_t)m->shared_experts * fe;
    RULE(fs > 4 * MAX_WIDTH,
         "shared_experts (%d) x expert_inner (%lld) = %lld hidden units of the shared expert, more "
         "than %d",
         m->shared_experts, (long long)fe, (long long)fs, 4 * MAX_WIDTH);
    RULE(d * fe > INT_MAX, "expert_inner (%lld) x n_embd (%lld) = %lld elements per expert tensor exceeds 2^31-1",
         (long long)fe, (long long)d, (long long)(d * fe));
    RULE(d * fs > INT_MAX,
         "shared_experts (%d) x expert_inner (%lld) x n_embd (%lld) = %lld elements per shared-expert "
         "tensor exceeds 2^31-1",
         m->shared_experts, (long long)fe, (long long)d, (long long)(d * fs));
    return 0;
}

// 64-bit size products of every key that sizes a tensor: the largest tensor, the tensor count,
// the expert widths.
static int validate_sizes(const ModelConfig *m) {
    int64_t d = m->n_embd, f = m->n_inner > 0 ? m->n_inner : 4 * d, V = m->vocab_size, E = m->num_experts;
    int64_t fe = m->expert_inner > 0 ? m->expert_inner : f;
    int64_t tensors = 4 + (int64_t)m->n_layer * (11 + 4 * E);   // the parameter registry's room
    RULE(tensors > MAX_TENSORS, "n_layer %d with num_experts %lld needs room for %lld tensors (at most %ld)",
         m->n_layer, (long long)E, (long long)tensors, MAX_TENSORS);
    int64_t big = V * d > d * f ? V * d : d * f;
    if ((int64_t)m->n_positions * d > big) big = (int64_t)m->n_positions * d;
    RULE(big > INT_MAX, "a tensor of %lld elements (vocab_size, n_positions or n_inner times n_embd) exceeds 2^31-1",
         (long long)big);
    // the memory these sizes need, per rank of the layout, is checked by ted train before it
    // allocates (model/memplan.h)
    return validate_expert_sizes(m, d, fe);
}

// The block family (docs/llama.md): llama's own keys, and what gpt2 does not have.
static int validate_arch(const ModelConfig *m) {
    int kv = cfg_kv_heads(m);
    RULE(m->n_kv_head < 0, "n_kv_head (%d) must be >= 1 (leave it out for n_head)", m->n_kv_head);
    if (!cfg_is_llama(m)) {
        RULE(kv != m->n_head, "n_kv_head (%d) needs model.arch llama (gpt2 has one key/value head per head)", kv);
        RULE(!m->tie_word_embeddings, "tie_word_embeddings false needs model.arch llama (gpt2's head is wte)");
        RULE(m->qkv_bias, "qkv_bias needs model.arch llama (gpt2's attention has its biases)");
        return 0;
    }
    RULE(m->n_head % kv != 0, "n_kv_head (%d) must divide n_head (%d)", kv, m->n_head);
    RULE((m->n_embd / m->n_head) % 2 != 0,
         "model.arch llama: the head size n_embd/n_head (%d) must be even (rotary pairs)", m->n_embd / m->n_head);
    RULE(!(m->rms_norm_eps > 0), "rms_norm_eps (%g) must be > 0", (double)m->rms_norm_eps);
    RULE(!(m->rope_theta > 1), "rope_theta (%g) must be > 1", (double)m->rope_theta);
    RULE(m->num_experts > 1 && m->expert_type != EXPERT_SWIGLU,
         "model.arch llama: moe.expert_type must be swiglu (Mixtral's w1/w3/w2 experts), not %s",
         expert_type_names[m->expert_type]);
    return 0;
}

static int validate_model(const ModelConfig *m) {
    RULE(m->vocab_size < 2 || m->vocab_size > 65536, "vocab_size (%d) must be in [2, 65536] (token shards are uint16)",
         m->vocab_size);
    RULE(m->n_positions < 1 || m->n_positions > MAX_POSITIONS, "n_positions (%d) must be in [1, %d]", m->n_positions,
         MAX_POSITIONS);
    RULE(m->n_embd < 1 || m->n_embd > MAX_WIDTH, "n_embd (%d) must be in [1, %d]", m->n_embd, MAX_WIDTH);
    RULE(m->n_layer < 1 || m->n_layer > MAX_LAYERS, "n_layer (%d) must be in [1, %d]", m->n_layer, MAX_LAYERS);
    RULE(m->n_head < 1, "n_head (%d) must be >= 1", m->n_head);
    RULE(m->n_embd % m->n_head != 0, "n_embd (%d) is not a multiple of n_head (%d)", m->n_embd, m->n_head);
    RULE(m->n_inner < 0 || m->n_inner > 4 * MAX_WIDTH, "n_inner (%d) must be in [1, %d] (leave it out for 4*n_embd)", m->n_inner,
         4 * MAX_WIDTH);
    RULE(m->num_experts < 1 || m->num_experts > MAX_EXPERTS, "num_experts (%d) must be in [1, %d]", m->num_experts,
         MAX_EXPERTS);
    RULE(m->moe_every < 1, "moe_every (%d) must be >= 1", m->moe_every);
    RULE(isnan(m->capacity_factor), "capacity_factor must be a number");
    if (m->num_experts > 1) {   // a dense model has no experts: the MoE keys have no effect (config_warn)
        RULE(!(m->capacity_factor <= m->num_experts),
             "capacity_factor (%g) must be <= num_experts (%d): beyond that no "
             "token is dropped (<= 0 is dropless)",
             (double)m->capacity_factor, m->num_experts);
        RULE(m->top_k > m->num_experts, "top_k (%d) > num_experts (%d)", m->top_k, m->num_experts);
    }
    RULE(m->top_k < 1, "top_k (%d) must be >= 1", m->top_k);
    RULE(m->min_capacity < 0, "min_capacity (%d) must be >= 0", m->min_capacity);
    RULE(m->group_size < 1, "group_size (%d) must be >= 1", m->group_size);
    RULE(!(m->aux_coef >= 0), "aux_coef (%g) must be >= 0", (double)m->aux_coef);
    RULE(!(m->z_coef >= 0), "z_coef (%g) must be >= 0", (double)m->z_coef);
    if (validate_arch(m) != 0 || validate_routing_model(m) != 0) return -1;
    return validate_sizes(m);
}

// A 0 given for a key whose 0 stands for another value (what leaving the key out gives): refused,
// so that no 0 silently means a default.
static int validate_given_zeros(const Config *c) {
    const ModelConfig *m = &c->model;
    RULE(c->seq_len == 0 && config_given("seq_len"), "%s 0 is not a length (leave it out for n_positions, %d)",
         named("seq_len", "--seq-len"), m->n_positions);
    RULE(m->n_inner == 0 && config_given("model.n_inner"), "%s 0 is not a width (leave it out for 4 x n_embd, %d)",
         named("model.n_inner", "--n-inner"), cfg_ffn(m));
    RULE(m->expert_inner == 0 && config_given("moe.expert_inner"),
         "%s 0 is not a width (leave it out for the FFN size n_inner, %d)", named("moe.expert_inner", "--expert-inner"),
         cfg_ffn(m));
    RULE(m->n_kv_head == 0 && config_given("model.n_kv_head"),
         "%s 0 is not a number of heads (leave it out for n_head, %d)", named("model.n_kv_head", "--n-kv-head"),
         m->n_head);
    RULE(c->threads == 0 && config_given("threads"), "%s 0 is not a number of threads (leave it out for every core)",
         named("threads", "--threads"));
    RULE(c->train_batch_size == 0 && config_given("train_batch_size"),
         "%s 0 is not a batch (leave it out, and the global batch is not checked)",
         named("train_batch_size", "--train-batch-size"));
    RULE(c->peak_tflops == 0 && config_flag_given("peak-tflops"),
         "--peak-tflops 0 is not a peak (leave it out, and the peak is measured)");
    return 0;
}

static int validate_training(const Config *c) {
    const ModelConfig *m = &c->model;
    RULE(c->seq_len < 0, "seq_len (%d) must be >= 1", c->seq_len);
    RULE(c->seq_len > m->n_positions, "seq_len (%d) > n_positions (%d)", c->seq_len, m->n_positions);
    RULE(c->micro_batch < 1, "micro_batch (%d) must be >= 1", c->micro_batch);
    RULE(c->micro_batch % m->group_size != 0, "micro_batch (%d) is not a multiple of group_size (%d)", c->micro_batch,
         m->group_size);
    RULE(c->grad_accum < 1 || c->grad_accum > MAX_ACCUM,
         "%s (%d) must be in [1, %d]: a step runs its micro-batches one after another before its progress line, a "
         "checkpoint or a stop",
         named("gradient_accumulation_steps", "--grad-accum"), c->grad_accum, MAX_ACCUM);
    RULE(c->steps < 0, "steps (%d) must be >= 0", c->steps);
    RULE(!(c->lr >= 0), "lr (%g) must be >= 0", (double)c->lr);
    RULE(!(c->min_lr >= 0), "min_lr (%g) must be >= 0", (double)c->min_lr);
    RULE(c->warmup < 0, "%s (%d) must be >= 0", named("scheduler.params.warmup_num_steps", "--warmup"), c->warmup);
    RULE(!(c->clip >= 0), "%s (%g) must be >= 0 (0: no clipping)", named("gradient_clipping", "--clip"),
         (double)c->clip);
    RULE(!(c->beta1 >= 0 && c->beta1 < 1), "beta1 (%g) must be in [0, 1)", (double)c->beta1);
    RULE(!(c->beta2 >= 0 && c->beta2 < 1), "beta2 (%g) must be in [0, 1)", (double)c->beta2);
    RULE(!(c->eps > 0), "eps (%g) must be > 0", (double)c->eps);
    RULE(!(c->weight_decay >= 0), "weight_decay (%g) must be >= 0", (double)c->weight_decay);
    RULE(c->zero_stage < 0 || c->zero_stage > 2, "zero_optimization.stage (%d) not supported (0, 1 or 2)",
         c->zero_stage);
    RULE(c->reduce_bucket_size < 1, "zero_optimization.reduce_bucket_size (%ld) must be >= 1", c->reduce_bucket_size);
    RULE(c->onebit && c->zero_stage != 0, "OneBitAdam needs zero_optimization.stage 0 (given %d)", c->zero_stage);
    RULE(c->freeze_step < 1, "optimizer.params.freeze_step (%d) must be >= 1 (v is frozen from the warm-up)",
         c->freeze_step);
    RULE(c->adam_named && !c->adam_w_mode && c->weight_decay > 0,
         "optimizer.type Adam with optimizer.params.adam_w_mode false adds weight_decay (%g) x w to the gradient (L2); "
         "ted's Adam decays the weights apart from it (AdamW): set adam_w_mode true, or weight_decay 0 (then the two "
         "are one)",
         (double)c->weight_decay);
    RULE(c->onebit && c->device == DEV_CUDA, "OneBitAdam runs on the CPU only (--device cuda given)");
    RULE(c->overlap_degree < 1 || c->overlap_degree > 64, "moe.overlap_degree (%d) must be in [1, 64]",
         c->overlap_degree);
    RULE(c->overlap_degree > 1 && c->device == DEV_CUDA,
         "moe.overlap_degree %d runs on the CPU only (--device cuda given)", c->overlap_degree);
    RULE(c->progress_thread && c->overlap_degree <= 1,
         "moe.progress_thread needs moe.overlap_degree > 1 (it moves the chunks)");
    RULE(c->overlap_comm && c->device == DEV_CUDA,
         "zero_optimization.overlap_comm runs on the CPU only (--device cuda given)");
    RULE(c->overlap_comm && c->onebit, "zero_optimization.overlap_comm is not supported with OneBitAdam (its "
                                       "compressed all-reduce runs after the backward)");
    RULE(c->overlap_comm && c->debug_expert_grad_scale != 1.0f,
         "zero_optimization.overlap_comm is not supported with "
         "--debug-expert-grad-scale (it scales gradients that are already travelling)");
    RULE(c->sparse.recompute && c->device == DEV_CUDA,
         "sparse_attention.recompute runs on the CPU only (--device cuda given)");
    RULE(c->bf16 && c->fp16, "bf16 and fp16 are both enabled");
    RULE(c->tile_size < 0, "tile_size (%ld) must be >= 0 (0 turns tiling off)", c->tile_size);
    RULE(c->save_every < 0, "save_every (%d) must be >= 0", c->save_every);
    RULE(c->eval_every < 0, "eval_every (%d) must be >= 0", c->eval_every);
    RULE(c->eval_windows < 0, "eval_windows (%d) must be >= 0", c->eval_windows);
    RULE(c->log_every < 0, "log_every (%d) must be >= 0", c->log_every);
    RULE(c->sample_every < 0, "sample_every (%d) must be >= 0", c->sample_every);
    RULE(c->threads < 0, "threads (%d) must be >= 0", c->threads);
    RULE(c->train_batch_size < 0, "train_batch_size (%d) must be >= 0", c->train_batch_size);
    RULE(!(c->peak_tflops >= 0), "peak_tflops (%g) must be >= 0", (double)c->peak_tflops);
    RULE(c->keep_last < 0, "--keep-last (%d) must be >= 0", c->keep_last);
    RULE(c->watchdog < 0, "--watchdog (%d) must be >= 0 seconds", c->watchdog);
    RULE(!(c->debug_expert_grad_scale > 0), "--debug-expert-grad-scale (%g) must be > 0",
         (double)c->debug_expert_grad_scale);
    return 0;
}

static int validate_layout(const Config *c) {
    const ModelConfig *m = &c->model;
    RULE(c->tp < 1, "tp (%d) must be >= 1", c->tp);
    RULE(c->ep < 1, "ep (%d) must be >= 1", c->ep);
    RULE(m->num_experts % c->ep != 0, "num_experts (%d) is not a multiple of ep (%d)", m->num_experts, c->ep);
    RULE(m->n_head % c->tp != 0, "n_head (%d) is not a multiple of tp (%d)", m->n_head, c->tp);
    RULE(cfg_ffn(m) % c->tp != 0, "FFN size (%d) is not a multiple of tp (%d)", cfg_ffn(m), c->tp);
    RULE(cfg_is_llama(m) && cfg_kv_heads(m) % c->tp != 0,
         "n_kv_head (%d) is not a multiple of tp (%d): tensor parallelism splits llama's attention by key/value head",
         cfg_kv_heads(m), c->tp);
    RULE(cfg_is_llama(m) && c->device == DEV_CUDA,
         "model.arch llama runs on the CPU only for now (--device cuda given)");
    return 0;
}

// The pipeline (design §6): L blocks in pp·v chunks, the schedule's own conditions.
static int validate_pipeline(const Config *c) {
    int L = c->model.n_layer, v = c->pp_virtual;
    RULE(c->pp < 1, "pp (%d) must be >= 1", c->pp);
    RULE(c->pp > 1 && c->zero_stage == 2, "zero_optimization.stage 2 is not supported with pp > 1 (the tied wte is "
                                          "summed between stages after the backward; use stage 0 or 1)");
    RULE(c->pp > 1 && c->onebit, "OneBitAdam is not supported with pp > 1");
    int one_in_flight = c->pp == 1 && c->pp_schedule != PP_GPIPE;
    RULE(!one_in_flight && c->model.router == ROUTER_NOISY_TOPK,
         "moe.router noisy_topk keeps one micro-batch's noise per block: not with pp > 1 or the gpipe schedule");
    RULE(
        !one_in_flight && c->model.router == ROUTER_SWITCH && c->model.jitter_eps > 0,
        "moe.router switch with jitter keeps one micro-batch's input per block: not with pp > 1 or the gpipe schedule");
    RULE(c->pp > 1 && c->log_tensors, "--log-tensors is not supported with pp > 1 (each stage holds other tensors)");
    RULE(v < 1, "pipeline.virtual_stages (%d) must be >= 1", v);
    RULE(v > 1 && c->pp_schedule != PP_INTERLEAVED, "pipeline.virtual_stages %d needs the interleaved schedule", v);
    RULE(c->pp_schedule == PP_INTERLEAVED && (c->pp < 2 || v < 2),
         "the interleaved schedule needs pp >= 2 and pipeline.virtual_stages >= 2 (given %d and %d)", c->pp, v);
    RULE((long)c->pp * v > L, "pp x virtual_stages = %ld chunks but the model has %d blocks (n_layer)", (long)c->pp * v,
         L);
    RULE(c->pp_schedule == PP_INTERLEAVED && c->grad_accum % c->pp != 0,
         "the interleaved schedule needs gradient_accumulation_steps (%d) to be a multiple of pp (%d)", c->grad_accum,
         c->pp);
    if (c->pp_nlayers) {
        long sum = 0;
        for (int i = 0; i < c->pp_nlayers; i++) sum += c->pp_layers[i];
        RULE(c->pp_nlayers != c->pp * v, "pipeline.layers has %d entries, pp x virtual_stages is %d", c->pp_nlayers,
             c->pp * v);
        RULE(sum != L, "pipeline.layers adds up to %ld blocks, the model has %d", sum, L);
    }
    return 0;
}

// The routing family (docs/config.md, Routers and experts): ranges, then the combinations that
// cannot work, whatever the layout and device.
static int validate_routing_model(const ModelConfig *m) {
    int E = m->num_experts, k = m->top_k;
    const char *r = router_names[m->router];
    RULE(!(m->jitter_eps >= 0 && m->jitter_eps < 1), "jitter_eps (%g) must be in [0, 1)", (double)m->jitter_eps);
    RULE(!(m->importance_coef >= 0), "importance_coef (%g) must be >= 0", (double)m->importance_coef);
    RULE(!(m->load_coef >= 0), "load_coef (%g) must be >= 0", (double)m->load_coef);
    RULE(!(m->bias_update_rate >= 0), "bias_update_rate (%g) must be >= 0", (double)m->bias_update_rate);
    RULE(m->num_groups < 1, "num_groups (%d) must be >= 1", m->num_groups);
    RULE(m->topk_groups < 1 || m->topk_groups > m->num_groups, "topk_groups (%d) must be in [1, num_groups %d]",
         m->topk_groups, m->num_groups);
    RULE(m->shared_experts < 0, "shared_experts (%d) must be >= 0", m->shared_experts);
    RULE(m->expert_inner < 0, "expert_inner (%d) must be >= 0 (0 = n_inner)", m->expert_inner);
    RULE(m->shared_expert_gate && (E <= 1 || m->shared_experts == 0),
         "shared_expert_gate scales the shared expert: it needs num_experts > 1 and shared_experts > 0");
    RULE(m->topk_renorm != 0 && m->topk_renorm != 1, "topk_renorm (%d) must be 0 or 1", m->topk_renorm);
    if (E <= 1) return 0;
    RULE(!m->topk_renorm && m->router != ROUTER_TOPK && m->router != ROUTER_MIXTRAL,
         "topk_renorm false (unrenormalised gates) is for router topk or mixtral, not %s", r);
    RULE(m->router == ROUTER_SWITCH && k != 1, "router switch routes top-1: top_k must be 1 (got %d)", k);
    RULE(m->router == ROUTER_GSHARD && k != 2, "router gshard routes top-2: top_k must be 2 (got %d)", k);
    RULE(m->router == ROUTER_NOISY_TOPK && k >= E,
         "router noisy_topk needs top_k (%d) < num_experts (%d) for its load loss", k, E);
    RULE(E % m->num_groups != 0, "num_experts (%d) is not a multiple of num_groups (%d)", E, m->num_groups);
    RULE(k > m->topk_groups * (E / m->num_groups), "top_k (%d) > the experts of topk_groups (%d) groups of %d", k,
         m->topk_groups, E / m->num_groups);
    RULE(m->use_rts && m->capacity_factor <= 0,
         "use_rts orders capacity slots: it needs capacity_factor > 0 (not dropless)");
    if (m->router == ROUTER_EXPERT_CHOICE) {
        RULE(m->use_rts, "router expert_choice has experts choose tokens: use_rts does not apply");
        RULE(m->capacity_factor <= 0, "router expert_choice needs capacity_factor > 0 (each expert takes C tokens)");
        RULE(m->num_groups > 1, "router expert_choice chooses tokens per expert: group-limited routing does not apply");
        RULE(m->bias_update_rate > 0,
             "router expert_choice: a per-expert bias cannot change an expert's choice of tokens");
    }
    return 0;
}

// The routing family on the run's layout and device.
static int validate_routing(const Config *c) {
    const ModelConfig *m = &c->model;
    const char *r = router_names[m->router];
    if (m->num_experts <= 1) return 0;
    RULE(cfg_expert_inner(m) % c->tp != 0, "expert_inner (%d) is not a multiple of tp (%d)", cfg_expert_inner(m),
         c->tp);
    if (c->device == DEV_CUDA) {   // the GPU backend has the §2 router and the gelu expert
        RULE(m->router != ROUTER_TOPK || m->use_rts || m->bias_update_rate > 0 || m->num_groups > 1,
             "--device cuda: moe.router %s%s%s%s runs on the CPU only for now", r, m->use_rts ? " with use_rts" : "",
             m->bias_update_rate > 0 ? " with bias balancing" : "", m->num_groups > 1 ? " with num_groups" : "");
        RULE(!m->topk_renorm, "--device cuda: moe.topk_renorm false runs on the CPU only for now");
        RULE(m->expert_type != EXPERT_GELU || m->shared_experts > 0,
             "--device cuda: expert_type %s / shared_experts %d run on the CPU only for now",
             expert_type_names[m->expert_type], m->shared_experts);
    }
    return 0;
}

// A checkpoint's config.json: the model rules, seq_len and the sparse layouts, the line naming the file.
int config_validate_checkpoint_model(const Config *c, const char *path) {
    reason[0] = 0;
    int rc = validate_model(&c->model);
    if (!rc && (c->seq_len < 1 || c->seq_len > c->model.n_positions)) {
        invalid("seq_len (%d) must be in [1, n_positions %d]", c->seq_len, c->model.n_positions);
        rc = -1;
    }
    if (!rc) rc = sparse_config_validate(&c->sparse, c->seq_len, reason, sizeof reason);
    if (rc) ted_error("%s: invalid config: %s", path, reason);
    return rc;
}

// The parameters each scheduler takes (DeepSpeed refuses others: its schedulers are called with
// scheduler.params as keyword arguments); "warmup_num_steps" is every type's.
static const char *const sched_params[SCHED_KINDS] = {"min_lr", "warmup_min_lr warmup_max_lr warmup_type",
                                                      "warmup_min_lr warmup_max_lr warmup_type total_num_steps",
                                                      "warmup_min_ratio cos_min_ratio warmup_type total_num_steps"};

static int validate_schedule(const Config *c) {
    static const char *const all[] = {"min_lr",          "warmup_min_lr",    "warmup_max_lr", "warmup_type",
                                      "total_num_steps", "warmup_min_ratio", "cos_min_ratio"};
    const SchedConfig *s = &c->sched;
    const char *name = sched_names[s->type];
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char path[64], word[32];
        snprintf(path, sizeof path, "scheduler.params.%s", all[i]);
        snprintf(word, sizeof word, "%s", all[i]);
        int takes = 0;
        for (const char *p = sched_params[s->type]; (p = strstr(p, word)); p += strlen(word))
            if ((p == sched_params[s->type] || p[-1] == ' ') && (p[strlen(word)] == ' ' || !p[strlen(word)])) takes = 1;
        RULE(config_given(path) && !takes, "%s is not a parameter of scheduler %s (it takes warmup_num_steps %s)", path,
             name, sched_params[s->type]);
    }
    if (s->type == SCHED_WARMUP_COSINE) {
        RULE(c->min_lr > c->lr, "%s (%g) is above the peak %s (%g): the cosine would rise to it",
             named("scheduler.params.min_lr", "--min-lr"), (double)c->min_lr, named("optimizer.params.lr", "--lr"),
             (double)c->lr);
        return 0;
    }
    RULE(c->warmup < 1, "scheduler %s needs warmup_num_steps >= 1 (given %d)", name, c->warmup);
    RULE(s->type != SCHED_WARMUP_LR && s->total_num_steps < 1,
         "scheduler %s needs scheduler.params.total_num_steps "
         ">= 1 (given %d)",
         name, s->total_num_steps);
    RULE(!(s->warmup_min_lr >= 0), "scheduler.params.warmup_min_lr (%g) must be >= 0", (double)s->warmup_min_lr);
    RULE(config_given("scheduler.params.warmup_max_lr") && !(s->warmup_max_lr >= 0),
         "scheduler.params.warmup_max_lr (%g) must be >= 0", (double)s->warmup_max_lr);
    RULE(!(s->warmup_min_ratio >= 0 && s->warmup_min_ratio <= 1),
         "scheduler.params.warmup_min_ratio (%g) must be in [0, 1] (a fraction of the lr)", (double)s->warmup_min_ratio);
    RULE(!(s->cos_min_ratio >= 0 && s->cos_min_ratio <= 1),
         "scheduler.params.cos_min_ratio (%g) must be in [0, 1] (a fraction of the lr)", (double)s->cos_min_ratio);
    double peak = s->warmup_max_lr >= 0 ? s->warmup_max_lr : s->type == SCHED_WARMUP_LR ? c->lr : 0.001;
    RULE(s->type != SCHED_WARMUP_COSINE_LR && s->warmup_min_lr > peak,
         "scheduler.params.warmup_min_lr (%g) is above the warm-up's peak %s (%g): the lr would fall while it warms up",
         (double)s->warmup_min_lr,
         s->warmup_max_lr >= 0 ? "warmup_max_lr" : s->type == SCHED_WARMUP_LR ? "(the optimizer lr)" : "(0.001)", peak);
    return 0;
}

// fp16's loss scaler, DeepSpeed's keys and ranges.
static int validate_scaler(const LossScaleConfig *s) {
    RULE(!(s->loss_scale >= 0), "fp16.loss_scale (%g) must be >= 0 (0: dynamic)", (double)s->loss_scale);
    RULE(s->initial_scale_power < 0 || s->initial_scale_power > 64, "fp16.initial_scale_power (%d) must be in [0, 64]",
         s->initial_scale_power);
    RULE(s->window < 1, "fp16.loss_scale_window (%d) must be >= 1", s->window);
    RULE(s->hysteresis < 1, "fp16.hysteresis (%d) must be >= 1", s->hysteresis);
    RULE(!(s->min_scale > 0), "fp16.min_loss_scale (%g) must be > 0", (double)s->min_scale);
    RULE(s->loss_scale == 0 && s->min_scale > ldexp(1.0, s->initial_scale_power),
         "fp16.min_loss_scale (%g) is above the initial scale 2^%d", (double)s->min_scale, s->initial_scale_power);
    return 0;
}

// DeepSpeed's metrics sections write under output_path/job_name: an empty output_path would be
// "/job_name", a folder under the root.
static int validate_outputs(const Config *c) {
    RULE(c->tb_enabled && !c->tensorboard_dir[0] && !c->tb_path[0],
         "tensorboard.output_path is empty: give the folder to write under (default \"runs\"; \".\" for this one)");
    RULE(c->csv_enabled && !c->csv_path[0],
         "csv_monitor.output_path is empty: give the folder to write under (default \"runs\"; \".\" for this one)");
    return 0;
}

int config_check(const Config *c, char *why, size_t n) {
    reason[0] = 0;
    int rc = validate_model(&c->model) || validate_given_zeros(c) || validate_training(c) || validate_schedule(c) ||
                     validate_scaler(&c->scaler) || validate_layout(c) || validate_pipeline(c) ||
                     validate_outputs(c) || sparse_config_validate(&c->sparse, cfg_seq_len(c), reason, sizeof reason) || validate_routing(c)
                 ? -1
                 : 0;
    if (why && n) snprintf(why, n, "%s", rc ? reason : "");
    return rc;
}

int config_validate(const Config *c) {
    char why[sizeof reason];
    if (config_check(c, why, sizeof why) == 0) return 0;
    ted_error("invalid config: %s", why);
    return -1;
}

// ---------------------------------------------------------------------------------------
// Keys of a switched-off feature

// One rule for every section: a key given (in the JSON or by its flag) whose feature is off is
// accepted, and a warning names it and says why it has no effect — so that one flag can switch
// a feature off (--num-experts 1 on an MoE config) without editing the file.
typedef struct {
    const char *prefix;
    int off;
    const char *why;
    const char *except;
} OffFeature;

static void warn_group(const OffFeature *f, FILE *out) {
    char names[1024] = "";
    size_t n = 0, plen = strlen(f->prefix);
    int count = 0;
    for (int i = 0; i < config_given_count() && n < sizeof names - 100; i++) {
        const char *k = config_given_key(i);
        if (!k || strncmp(k, f->prefix, plen) != 0 || (f->except && strstr(f->except, k + plen))) continue;
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", count ? ", " : "", k);
        count++;
    }
    if (count) fprintf(out, "warning: %s %s no effect: %s\n", names, count > 1 ? "have" : "has", f->why);
}

// The DeepSpeed keys accepted without effect whose value asks for something ted does not do (the
// JSON reader marks only those as given).
static void warn_no_effect(FILE *out) {
    char does;
    const char *why, *key;
    for (int i = 0; (key = config_no_effect_key(i, &does, &why)); i++)
        if (config_json_given(key))
            fprintf(out, "warning: %s%s has no effect: %s\n", key,
                    does == 't'   ? " false"
                    : does == 'f' ? " true"
                                  : "",
                    why);
}

// A warm-up longer than the run (DeepSpeed's schedulers warm up over at least 2 steps), and a
// DeepSpeed decay that ends before its warm-up does.
static void note_warmup(const Config *c, FILE *out) {
    const SchedConfig *s = &c->sched;
    int W = s->type == SCHED_WARMUP_COSINE || c->warmup > 2 ? c->warmup : 2;
    if (c->steps > 0 && W > c->steps)
        fprintf(out,
                "note: the warm-up (%d steps) is longer than the run (%d steps): the lr never reaches its peak "
                "(--warmup, scheduler.params.warmup_num_steps)\n",
                W, c->steps);
    if ((s->type == SCHED_WARMUP_DECAY_LR || s->type == SCHED_WARMUP_COSINE_LR) && s->total_num_steps < W)
        fprintf(out,
                "note: scheduler.params.total_num_steps (%d) ends before the warm-up (%d steps): the decay has no "
                "steps\n",
                s->total_num_steps, W);
}

void config_warn(const Config *c, FILE *out) {
    if (!out) return;
    const ModelConfig *m = &c->model;
    const OffFeature off[] = {
        {"moe.", m->num_experts == 1, "num_experts is 1 (a dense model)", "num_experts"},
        {"moe.jitter_eps", m->num_experts > 1 && m->router != ROUTER_SWITCH, "only router switch jitters its input",
         NULL},
        {"moe.importance_coef", m->num_experts > 1 && m->router != ROUTER_NOISY_TOPK,
         "only router noisy_topk has that loss", NULL},
        {"moe.load_coef", m->num_experts > 1 && m->router != ROUTER_NOISY_TOPK, "only router noisy_topk has that loss",
         NULL},
        {"moe.topk_groups", m->num_experts > 1 && m->num_groups == 1, "num_groups is 1 (no group-limited routing)",
         NULL},
        {"optimizer.params.freeze_step", !c->onebit, "optimizer.type is AdamW (freeze_step is OneBitAdam's)", NULL},
        {"optimizer.params.compression", !c->onebit, "optimizer.type is AdamW (compression is OneBitAdam's)", NULL},
        {"optimizer.params.adam_w_mode", c->onebit, "optimizer.type is OneBitAdam (adam_w_mode is Adam's)", NULL},
        {"optimizer.params.adam_w_mode", !c->onebit && !c->adam_named && !c->adam_w_mode,
         "optimizer.type AdamW decays the weights apart from the gradient whatever adam_w_mode says (as DeepSpeed's "
         "does)",
         NULL},
        {"fp16.", !c->fp16, "fp16 is not enabled", "enabled"},
        {"zero_optimization.reduce_bucket_size", c->zero_stage != 2, "the buckets are ZeRO stage 2's", NULL},
        {"pipeline.virtual_stages", c->pp == 1, "pp is 1 (no pipeline)", NULL},
        {"pipeline.layers", c->pp == 1, "pp is 1 (no pipeline)", NULL},
        {"model.rope_theta", !cfg_is_llama(m), "model.arch is gpt2 (learned positions)", NULL},
        {"model.rms_norm_eps", !cfg_is_llama(m), "model.arch is gpt2 (LayerNorm, eps 1e-5)", NULL},
    };
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (off[i].off) warn_group(&off[i], out);
    warn_no_effect(out);
    note_warmup(c, out);
}
