// metrics.c — JSONL lines (see metrics.h), written with cJSON.
#include "io/metrics.h"
#include "core/alloc.h"
#include "parallel/comm.h"
#include "core/util.h"
#include <cjson/cJSON.h>

static cJSON *comm_json(void) {
    const CommStats *s = comm_stats();
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < COLL_N; c++) {
        CommCount sum = {0, 0, 0, 0};
        for (int g = 0; g < GROUP_N; g++) {
            sum.calls += s->c[c][g].calls; sum.bytes += s->c[c][g].bytes; sum.ms += s->c[c][g].ms;
            sum.exposed_ms += s->c[c][g].exposed_ms;
        }
        for (int g = -1; g < GROUP_N; g++) {
            const CommCount *k = g < 0 ? &sum : &s->c[c][g];
            char name[64];
            if (g < 0) snprintf(name, sizeof name, "%s", comm_coll_name(c));
            else snprintf(name, sizeof name, "%s.%s", comm_coll_name(c), comm_group_name(g));
            cJSON *x = cJSON_AddObjectToObject(o, name);
            cJSON_AddNumberToObject(x, "calls", (double)k->calls);
            cJSON_AddNumberToObject(x, "bytes", (double)k->bytes);
            cJSON_AddNumberToObject(x, "ms", k->ms);
            cJSON_AddNumberToObject(x, "exposed_ms", k->exposed_ms);
        }
    }
    return o;
}

static cJSON *mem_json(void) {
    const MemStats *s = mem_stats();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "peak", (double)s->peak);
    cJSON_AddNumberToObject(o, "peak_forward", (double)s->phase_peak[PHASE_FORWARD]);
    cJSON_AddNumberToObject(o, "peak_backward", (double)s->phase_peak[PHASE_BACKWARD]);
    cJSON_AddNumberToObject(o, "peak_optimizer", (double)s->phase_peak[PHASE_OPTIMIZER]);
    for (int c = 0; c < MEM_NCAT; c++) cJSON_AddNumberToObject(o, mem_category_name(c), (double)s->current[c]);
    cJSON_AddNumberToObject(o, "optimizer_temp_peak", (double)s->optimizer_temp_peak);
    cJSON_AddNumberToObject(o, "device", (double)s->device);             // GPU bytes held (0 on the CPU)
    cJSON_AddNumberToObject(o, "device_peak", (double)s->device_peak);
    // what each category held at most during each phase
    cJSON *ph = cJSON_AddObjectToObject(o, "by_phase");
    const char *names[] = {"forward", "backward", "optimizer"};
    for (int p = PHASE_FORWARD; p <= PHASE_OPTIMIZER; p++) {
        cJSON *x = cJSON_AddObjectToObject(ph, names[p - PHASE_FORWARD]);
        for (int c = 0; c < MEM_NCAT; c++) cJSON_AddNumberToObject(x, mem_category_name(c), (double)s->phase_cat_peak[p][c]);
    }
    return o;
}

static void emit(FILE *f, cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    fprintf(f, "%s\n", text);
    write_check(f, NULL);   // a full disk stops the run, naming the log
    cJSON_free(text);
    cJSON_Delete(o);
}

void metrics_step(FILE *f, const StepMetrics *m) {
    if (!f) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", (double)m->step);
    cJSON_AddNumberToObject(o, "loss", m->loss);
    cJSON_AddNumberToObject(o, "lm_loss", m->lm_loss);
    cJSON_AddNumberToObject(o, "aux_loss", m->aux_loss);
    cJSON_AddNumberToObject(o, "lr", m->lr);
    cJSON_AddNumberToObject(o, "grad_norm", m->grad_norm);
    cJSON_AddNumberToObject(o, "step_ms", m->step_ms);
    cJSON_AddNumberToObject(o, "tokens_per_s", m->tokens_per_s);
    cJSON_AddNumberToObject(o, "mfu", m->mfu);
    cJSON_AddNumberToObject(o, "dropped_frac", m->dropped_frac);
    cJSON_AddNumberToObject(o, "loss_scale", m->loss_scale);
    cJSON_AddBoolToObject(o, "skipped", m->skipped);
    cJSON_AddNumberToObject(o, "max_mean", m->max_mean);
    if (m->moe) cJSON_AddItemToObject(o, "moe", cJSON_Parse(m->moe));
    cJSON_AddItemToObject(o, "comm", comm_json());
    cJSON_AddItemToObject(o, "mem", mem_json());
    emit(f, o);
}

void metrics_eval(FILE *f, long step, double val_loss, double lm, double aux, long windows) {
    if (!f) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "val_loss", val_loss);
    cJSON_AddNumberToObject(o, "val_lm_loss", lm);
    cJSON_AddNumberToObject(o, "val_aux_loss", aux);
    cJSON_AddNumberToObject(o, "val_windows", (double)windows);
    emit(f, o);
}

void comm_accumulate(CommStats *acc) {
    const CommStats *s = comm_stats();
    for (int c = 0; c < COLL_N; c++)
        for (int g = 0; g < GROUP_N; g++) {
            acc->c[c][g].calls += s->c[c][g].calls;
            acc->c[c][g].bytes += s->c[c][g].bytes;
            acc->c[c][g].ms += s->c[c][g].ms;
            acc->c[c][g].exposed_ms += s->c[c][g].exposed_ms;
        }
}

// The split of rank 0's step: compute is what the collectives did not hold up (the step minus the
// exposed communication). With overlap, each collective also shows how much of its time was exposed.
void comm_summary(FILE *out, const CommStats *acc, double total_ms, long steps) {
    if (steps <= 0 || total_ms <= 0) return;
    double exposed = 0, span = 0;
    for (int c = 0; c < COLL_N; c++)
        for (int g = 0; g < GROUP_N; g++) { exposed += acc->c[c][g].exposed_ms; span += acc->c[c][g].ms; }
    int overlap = span - exposed > 0.05 * steps;   // some collective ran behind compute
    fprintf(out, "time per step (rank 0, %ld steps): %.1f ms\n", steps, total_ms / steps);
    fprintf(out, "  %-24s %9.1f ms  %5.1f%%\n", "compute", (total_ms - exposed) / steps, 100 * (total_ms - exposed) / total_ms);
    for (int c = 0; c < COLL_N; c++)
        for (int g = 0; g < GROUP_N; g++) {
            const CommCount *k = &acc->c[c][g];
            if (!k->calls) continue;
            char name[48];
            snprintf(name, sizeof name, "%s.%s", comm_coll_name(c), comm_group_name(g));
            char calls[32];   // per step: whole when every step makes the same calls
            if (k->calls % steps == 0) snprintf(calls, sizeof calls, "%6lld", k->calls / steps);
            else snprintf(calls, sizeof calls, "%6.1f", (double)k->calls / steps);
            fprintf(out, "  %-24s %9.1f ms  %5.1f%%  %s calls  %10.0f bytes", name, k->exposed_ms / steps,
                    100 * k->exposed_ms / total_ms, calls, (double)k->bytes / steps);
            if (overlap) fprintf(out, "  (%.1f ms in flight, %.0f%% hidden)", k->ms / steps,
                                 k->ms > 0 ? 100 * (1 - k->exposed_ms / k->ms) : 0.0);
            fputc('\n', out);
        }
}
