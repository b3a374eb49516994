/* replay_file.c — the replay buffer's save file, shared by every backend: the header, a writer
 * that checksums what it writes, and a reader that checks every number before a backend uses it.
 *
 * A save file feeds indices and counts straight into the sampler and the loss: a priority that is
 * NaN sends the tree descent past its children, an action byte past its branch indexes past the
 * Q row, a size past the capacity reads past the arrays. So nothing from the file is trusted: the
 * header is range-checked against the buffer before anything is read (and the file's length
 * against the header, so a damaged size is refused before gigabytes are read), each value of the
 * sections is checked as it streams past — the CPU reads a section into its arrays, the GPU in
 * pinned chunks on their way to the device, both through vx_replay_reader_read — and an XXH3-64
 * over the whole file catches any damage the ranges let through (a flipped mantissa bit). The
 * checks are the invariants the buffer itself keeps (replay_cpu.c): size = min(inserted,
 * capacity), cursor = inserted mod capacity, every stored priority |δ| + ε ≤ the running maximum,
 * slots never written all zero; a file that breaks one was not written by a buffer.
 *
 * What it does not do: repair. A file that fails is refused whole, and the backend empties the
 * buffer it was reading into. */
#include "replay_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL /* header-only: no library to link */
#include <xxhash.h>

_Static_assert(sizeof(vx_replay_file_header) == 144, "the replay file header has no padding");
_Static_assert(sizeof(vx_slot_meta) == 16, "a slot's small fields are a 16-byte record");

enum { PART_OBS, PART_NEXT_OBS, PART_META, PART_PRIO, PART_ORDER, PART_N };
static const char *const part_name[PART_N] = {"obs", "next_obs", "meta", "prio", "order"};
static const size_t part_elem[PART_N] = {sizeof(float), sizeof(float), sizeof(vx_slot_meta),
                                         sizeof(double), sizeof(uint32_t)};

int vx_replay_action_max(int branch)
{
    static const int max[VX_ACTION_BRANCHES] = {VX_EXPOSURE_LEVELS - 1, VX_ORDER_TYPES - 1,
                                                VX_URGENCY_LEVELS - 1};
    return branch >= 0 && branch < VX_ACTION_BRANCHES ? max[branch] : -1;
}

void vx_replay_header_init(vx_replay_file_header *h, const vx_replay_cfg *cfg)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, VX_REPLAY_MAGIC, 8);
    h->format = VX_REPLAY_FORMAT;
    h->kind = (uint32_t)cfg->kind;
    h->capacity = cfg->capacity;
    h->obs_dim = (uint32_t)cfg->obs_dim;
    h->alpha = cfg->alpha;
    h->eps = cfg->eps;
    h->seed = cfg->seed;
}

/* The header as hashed: its checksum field 0. */
static void hash_header(XXH3_state_t *x, const vx_replay_file_header *h)
{
    vx_replay_file_header z = *h;
    z.checksum = 0;
    XXH3_64bits_update(x, &z, sizeof z);
}

/* ---- the writer ------------------------------------------------------------------------------ */

vx_status vx_replay_writer_begin(vx_replay_writer *w, FILE *f, const vx_replay_file_header *h,
                                 vx_err *e)
{
    memset(w, 0, sizeof *w);
    w->f = f;
    w->h = *h;
    w->h.checksum = 0;
    XXH3_state_t *x = XXH3_createState();
    if (!x) return vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory for the checksum");
    XXH3_64bits_reset(x);
    hash_header(x, &w->h);
    w->hash = x;
    w->bad = fwrite(&w->h, sizeof w->h, 1, f) != 1;
    return VX_OK;
}

void vx_replay_writer_put(vx_replay_writer *w, const void *p, size_t bytes)
{
    if (w->bad || bytes == 0) return;
    XXH3_64bits_update((XXH3_state_t *)w->hash, p, bytes);
    w->bad = fwrite(p, 1, bytes, w->f) != bytes;
}

vx_status vx_replay_writer_end(vx_replay_writer *w, const char *path, vx_err *e)
{
    XXH3_state_t *x = w->hash;
    if (x) w->h.checksum = (uint64_t)XXH3_64bits_digest(x);
    XXH3_freeState(x);
    w->hash = NULL;
    /* the header again, now with its checksum, over the first copy */
    if (!w->bad) w->bad = fseek(w->f, 0, SEEK_SET) != 0;
    if (!w->bad) w->bad = fwrite(&w->h, sizeof w->h, 1, w->f) != 1;
    if (!w->bad) w->bad = fseek(w->f, 0, SEEK_END) != 0;
    if (w->bad) return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
    return VX_OK;
}

/* ---- the header's checks --------------------------------------------------------------------- */

static vx_status bad_field(const vx_replay_reader *rd, int64_t offset, const char *field,
                           const char *what, vx_err *e)
{
    return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, offset, field, "%s", what);
}

#define HDR_OFF(field) ((int64_t)offsetof(vx_replay_file_header, field))

/* Settings: the file must be of a buffer shaped like this one. */
static vx_status check_shape(const vx_replay_reader *rd, vx_err *e)
{
    const vx_replay_file_header *h = &rd->h;
    const vx_replay_cfg *c = &rd->cfg;
    if (h->kind != (uint32_t)c->kind || h->capacity != c->capacity ||
        h->obs_dim != (uint32_t)c->obs_dim)
        return vx_err_record(e, VX_ERR_ARG, rd->path, -1, HDR_OFF(kind), "kind",
                             "saved buffer (kind %u, capacity %llu, obs %u) does not match this "
                             "one (kind %d, capacity %zu, obs %d)",
                             h->kind, (unsigned long long)h->capacity, h->obs_dim, (int)c->kind,
                             c->capacity, c->obs_dim);
    return VX_OK;
}

/* The counters: the invariants every buffer keeps between them. */
static vx_status check_counters(const vx_replay_reader *rd, vx_err *e)
{
    const vx_replay_file_header *h = &rd->h;
    uint64_t C = h->capacity;
    char m[200];
    if (h->size > C) {
        snprintf(m, sizeof m, "%llu transitions stored, more than the capacity %llu",
                 (unsigned long long)h->size, (unsigned long long)C);
        return bad_field(rd, HDR_OFF(size), "size", m, e);
    }
    if (h->size != (h->inserted < C ? h->inserted : C)) {
        snprintf(m, sizeof m, "%llu inserted cannot leave %llu stored at capacity %llu",
                 (unsigned long long)h->inserted, (unsigned long long)h->size,
                 (unsigned long long)C);
        return bad_field(rd, HDR_OFF(inserted), "inserted", m, e);
    }
    if (h->cursor != h->inserted % C) {
        snprintf(m, sizeof m, "cursor %llu, but %llu inserted at capacity %llu put it at %llu",
                 (unsigned long long)h->cursor, (unsigned long long)h->inserted,
                 (unsigned long long)C, (unsigned long long)(h->inserted % C));
        return bad_field(rd, HDR_OFF(cursor), "cursor", m, e);
    }
    if (h->order_n > h->size || (h->kind != VX_REPLAY_RANK && h->order_n != 0)) {
        snprintf(m, sizeof m, "a rank order of %llu slots for %llu stored%s",
                 (unsigned long long)h->order_n, (unsigned long long)h->size,
                 h->kind != VX_REPLAY_RANK ? " in a buffer that is not rank-based" : "");
        return bad_field(rd, HDR_OFF(order_n), "order_n", m, e);
    }
    if (h->dirty > 1) {
        snprintf(m, sizeof m, "%u is not 0 or 1", h->dirty);
        return bad_field(rd, HDR_OFF(dirty), "dirty", m, e);
    }
    if (h->calls_since_refresh < 0 || h->calls_since_refresh > INT_MAX) {
        snprintf(m, sizeof m, "%lld is outside 0..%d", (long long)h->calls_since_refresh, INT_MAX);
        return bad_field(rd, HDR_OFF(calls_since_refresh), "calls_since_refresh", m, e);
    }
    return VX_OK;
}

/* The doubles: the largest priority bounds every leaf, so C · max_p^α bounds the total. */
static vx_status check_doubles(const vx_replay_reader *rd, vx_err *e)
{
    const vx_replay_file_header *h = &rd->h;
    char m[200];
    if (!(isfinite(h->max_p) && h->max_p > 0 &&
          isfinite(pow(h->max_p, rd->cfg.alpha) * (double)h->capacity))) {
        snprintf(m, sizeof m, "largest priority %g is not finite and > 0 (or its total overflows)",
                 h->max_p);
        return bad_field(rd, HDR_OFF(max_p), "max_p", m, e);
    }
    if (!(isfinite(h->alpha) && h->alpha >= 0)) {
        snprintf(m, sizeof m, "%g is not finite and >= 0", h->alpha);
        return bad_field(rd, HDR_OFF(alpha), "alpha", m, e);
    }
    if (!(isfinite(h->eps) && h->eps > 0)) {
        snprintf(m, sizeof m, "%g is not finite and > 0", h->eps);
        return bad_field(rd, HDR_OFF(eps), "eps", m, e);
    }
    return VX_OK;
}

/* The file's length against the sections the header describes: a short file is refused before
 * anything is read, naming the section it ends in. */
static vx_status check_length(vx_replay_reader *rd, vx_err *e)
{
    const vx_replay_file_header *h = &rd->h;
    uint64_t D = h->obs_dim;
    rd->part_n[PART_OBS] = rd->part_n[PART_NEXT_OBS] = h->size * D * sizeof(float);
    rd->part_n[PART_META] = h->capacity * sizeof(vx_slot_meta);
    rd->part_n[PART_PRIO] = h->size * sizeof(double);
    rd->part_n[PART_ORDER] = h->order_n * sizeof(uint32_t);
    uint64_t want = sizeof *h;
    for (int p = 0; p < PART_N; p++) want += rd->part_n[p];
    struct stat sb;
    if (fstat(fileno(rd->f), &sb) != 0) return VX_OK; /* the reads will tell */
    uint64_t have = (uint64_t)sb.st_size;
    if (have == want) return VX_OK;
    if (have > want)
        return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, (int64_t)want, "size",
                             "%llu bytes, but the header describes %llu: trailing bytes",
                             (unsigned long long)have, (unsigned long long)want);
    uint64_t at = sizeof *h;
    int p = 0;
    while (p < PART_N - 1 && at + rd->part_n[p] <= have) at += rd->part_n[p++];
    return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, (int64_t)have, part_name[p],
                         "truncated replay file: it ends inside %s (%llu bytes, the header "
                         "describes %llu)",
                         part_name[p], (unsigned long long)have, (unsigned long long)want);
}

/* ---- the reader ------------------------------------------------------------------------------ */

static vx_status read_header(vx_replay_reader *rd, vx_err *e)
{
    vx_replay_file_header *h = &rd->h;
    /* magic and format first: an older file's header is laid out differently after them */
    if (fread(h, 12, 1, rd->f) != 1 || memcmp(h->magic, VX_REPLAY_MAGIC, 8) != 0)
        return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, 0, "magic", "not a vixen replay file");
    if (h->format < VX_REPLAY_FORMAT)
        return vx_err_record(e, VX_ERR_UNSUPPORTED, rd->path, -1, HDR_OFF(format), "format",
                             "replay file format %u is from an older vixen: this one reads format "
                             "%d (which carries a checksum); start the run again",
                             h->format, VX_REPLAY_FORMAT);
    if (h->format > VX_REPLAY_FORMAT)
        return vx_err_record(e, VX_ERR_UNSUPPORTED, rd->path, -1, HDR_OFF(format), "format",
                             "replay file format %u is from a newer vixen: this one reads format "
                             "%d",
                             h->format, VX_REPLAY_FORMAT);
    if (fread((char *)h + 12, sizeof *h - 12, 1, rd->f) != 1)
        return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, 12, "header",
                             "truncated replay file: the header is cut short");
    rd->offset = sizeof *h;
    vx_status st = check_shape(rd, e);
    if (!st) st = check_counters(rd, e);
    if (!st) st = check_doubles(rd, e);
    if (!st) st = check_length(rd, e);
    return st;
}

vx_status vx_replay_reader_open(vx_replay_reader *rd, const char *path, const vx_replay_cfg *cfg,
                                vx_err *e)
{
    memset(rd, 0, sizeof *rd);
    rd->path = path;
    rd->cfg = *cfg;
    vx_status st = vx_file_open_read(path, &rd->f, e);
    if (st) return st;
    st = read_header(rd, e);
    if (!st) {
        XXH3_state_t *x = XXH3_createState();
        if (!x) st = vx_err_set(e, VX_ERR_NOMEM, "replay: out of memory for the checksum");
        else XXH3_64bits_reset(x), hash_header(x, &rd->h);
        rd->hash = x;
    }
    if (st) vx_replay_reader_close(rd);
    return st;
}

void vx_replay_reader_close(vx_replay_reader *rd)
{
    if (rd->f) fclose(rd->f);
    XXH3_freeState((XXH3_state_t *)rd->hash);
    rd->f = NULL;
    rd->hash = NULL;
}

/* Element k of a section, at byte `at` of the file, refused: names the slot. */
static vx_status bad_value(const vx_replay_reader *rd, uint64_t at, const char *field, size_t slot,
                           const char *what, vx_err *e)
{
    return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, (int64_t)at, field, "slot %zu: %s", slot,
                         what);
}

static vx_status check_floats(const vx_replay_reader *rd, const float *x, size_t n, size_t first,
                              uint64_t at, vx_err *e)
{
    size_t D = (size_t)rd->cfg.obs_dim;
    for (size_t k = 0; k < n; k++)
        if (!isfinite(x[k])) {
            char m[96];
            snprintf(m, sizeof m, "observation value %zu is %g, not finite", (first + k) % D,
                     (double)x[k]);
            return bad_value(rd, at + k * 4, part_name[rd->part], (first + k) / D, m, e);
        }
    return VX_OK;
}

/* A stored slot's small fields; slots never written hold zeros. */
static vx_status check_meta(const vx_replay_reader *rd, const vx_slot_meta *m, size_t n,
                            size_t first, uint64_t at, vx_err *e)
{
    static const char *const branch[VX_ACTION_BRANCHES] = {"exposure", "order type", "urgency"};
    static const vx_slot_meta zero;
    char w[128];
    for (size_t k = 0; k < n; k++) {
        size_t i = first + k;
        uint64_t o = at + k * sizeof *m;
        if (i >= rd->h.size) {
            if (memcmp(&m[k], &zero, sizeof zero) != 0)
                return bad_value(rd, o, "meta", i, "beyond the stored slots but not empty", e);
            continue;
        }
        for (int j = 0; j < VX_ACTION_BRANCHES; j++)
            if (m[k].action[j] > vx_replay_action_max(j)) {
                snprintf(w, sizeof w, "%s action %d outside 0..%d", branch[j], m[k].action[j],
                         vx_replay_action_max(j));
                return bad_value(rd, o + offsetof(vx_slot_meta, action) + (uint64_t)j, "action", i,
                                 w, e);
            }
        if (!isfinite(m[k].reward)) {
            snprintf(w, sizeof w, "reward %g is not finite", (double)m[k].reward);
            return bad_value(rd, o, "reward", i, w, e);
        }
        if (m[k].term > 1 || m[k].trunc > 1) {
            snprintf(w, sizeof w, "flags terminated %d, truncated %d: each must be 0 or 1",
                     m[k].term, m[k].trunc);
            return bad_value(rd, o + offsetof(vx_slot_meta, term), "flags", i, w, e);
        }
        if (m[k].steps < 1)
            return bad_value(rd, o + offsetof(vx_slot_meta, steps), "steps", i,
                             "n-step count 0 (at least 1)", e);
        if (m[k].pad[0] || m[k].pad[1])
            return bad_value(rd, o + offsetof(vx_slot_meta, pad), "meta", i, "padding not zero", e);
    }
    return VX_OK;
}

static vx_status check_prio(const vx_replay_reader *rd, const double *p, size_t n, size_t first,
                            uint64_t at, vx_err *e)
{
    for (size_t k = 0; k < n; k++)
        if (!(isfinite(p[k]) && p[k] > 0 && p[k] <= rd->h.max_p)) {
            char m[128];
            snprintf(m, sizeof m, "priority %g is outside (0, %g], the largest the file records",
                     p[k], rd->h.max_p);
            return bad_value(rd, at + k * sizeof *p, "prio", first + k, m, e);
        }
    return VX_OK;
}

static vx_status check_order(const vx_replay_reader *rd, const uint32_t *o, size_t n, size_t first,
                             uint64_t at, vx_err *e)
{
    for (size_t k = 0; k < n; k++)
        if (o[k] >= rd->h.size)
            return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, (int64_t)(at + k * 4), "order",
                                 "rank %zu: slot %u is outside the %llu stored", first + k, o[k],
                                 (unsigned long long)rd->h.size);
    return VX_OK;
}

static vx_status check_part(const vx_replay_reader *rd, const void *x, size_t bytes, vx_err *e)
{
    size_t n = bytes / part_elem[rd->part], first = (size_t)(rd->done / part_elem[rd->part]);
    switch (rd->part) {
    case PART_OBS:
    case PART_NEXT_OBS: return check_floats(rd, x, n, first, rd->offset, e);
    case PART_META: return check_meta(rd, x, n, first, rd->offset, e);
    case PART_PRIO: return check_prio(rd, x, n, first, rd->offset, e);
    default: return check_order(rd, x, n, first, rd->offset, e);
    }
}

vx_status vx_replay_reader_read(vx_replay_reader *rd, void *dst, size_t bytes, vx_err *e)
{
    if (bytes == 0) return VX_OK;
    while (rd->part < PART_N && rd->done == rd->part_n[rd->part]) rd->part++, rd->done = 0;
    if (rd->part >= PART_N || bytes > rd->part_n[rd->part] - rd->done ||
        bytes % part_elem[rd->part] != 0)
        return vx_err_set(e, VX_ERR_ARG, "replay: a read of %zu bytes past a section of %s", bytes,
                          rd->path);
    if (fread(dst, 1, bytes, rd->f) != bytes)
        return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, (int64_t)rd->offset,
                             part_name[rd->part], "truncated replay file: it ends inside %s",
                             part_name[rd->part]);
    vx_status st = check_part(rd, dst, bytes, e);
    if (st) return st;
    XXH3_64bits_update((XXH3_state_t *)rd->hash, dst, bytes);
    rd->done += bytes;
    rd->offset += bytes;
    return VX_OK;
}

vx_status vx_replay_reader_finish(vx_replay_reader *rd, vx_err *e)
{
    uint64_t want = sizeof rd->h;
    for (int p = 0; p < PART_N; p++) want += rd->part_n[p];
    if (rd->offset != want)
        return vx_err_set(e, VX_ERR_ARG, "replay: %s finished after %llu of %llu bytes", rd->path,
                          (unsigned long long)rd->offset, (unsigned long long)want);
    if (fgetc(rd->f) != EOF)
        return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, (int64_t)want, "size",
                             "trailing bytes after the data the header describes");
    uint64_t sum = (uint64_t)XXH3_64bits_digest((XXH3_state_t *)rd->hash);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    sum = rd->h.checksum; /* computed but not enforced (docs/fuzzing.md) */
#endif
    if (sum != rd->h.checksum)
        return vx_err_record(e, VX_ERR_FORMAT, rd->path, -1, HDR_OFF(checksum), "checksum",
                             "checksum mismatch: the file is damaged (XXH3 %016llx, the header "
                             "says %016llx)",
                             (unsigned long long)sum, (unsigned long long)rd->h.checksum);
    return VX_OK;
}
