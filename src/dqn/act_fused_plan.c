/* act_fused_plan.c — the fused acting kernel's layout and sizes (act_fused_plan.h). */
#include "act_fused_plan.h"

#include <stdio.h>
#include <string.h>

static int round8(int n) { return (n + 7) & ~7; }
static int round16(int n) { return (n + 15) & ~15; }

/* Head g's layers: the value's (g = 0) or branch g − 1's. */
static const vx_dense *head1(const vx_qnet_layout *L, int g)
{
    return g ? &L->adv1[g - 1] : &L->value1;
}
static const vx_dense *head2(const vx_qnet_layout *L, int g)
{
    return g ? &L->adv2[g - 1] : &L->value2;
}

/* Where element (k, n) of a product's B operand comes from in the flat parameters (−1: zero). */
typedef struct {
    const vx_qnet_layout *L;
    int kind; /* 0: one dense layer's weights; 1: the heads' first layers side by side */
    const vx_dense *d;
    int rows; /* kind 0: the rows that exist (the input's width for layer 0) */
    int Hh;
} b_source;

static int b_at(const b_source *s, int k, int n)
{
    if (s->kind == 1) { /* column n: head n / Hh's hidden unit n % Hh */
        const vx_dense *d = head1(s->L, n / s->Hh);
        return (int)(d->w + (size_t)k * s->Hh + (size_t)(n % s->Hh));
    }
    if (k >= s->rows || n >= s->d->out) return -1;
    return (int)(s->d->w + (size_t)k * s->d->out + (size_t)n);
}

/* One K × N matrix B in fragment order from float off (tc_tile.cuh's tc::frag), its map entries
 * at fm + off·(bf16 ? 2 : 1). TF32: its 8 × 8 tiles row by row (tile (kt, nt) at
 * (kt·N/8 + nt)·32·E), in a tile lane l's share at l·E: B(t, g) and B(t + 4, g) with g = l / 4,
 * t = l % 4, as they are (E = 2) or twice (E = 4: the big parts, then the small ones). BF16: its
 * 16 × 8 tiles (K rounded up to 16, zero rows past it) row by row, lane l's share 4 bf16 in 2
 * floats: B(2t, g), B(2t + 1, g), B(2t + 8, g), B(2t + 9, g). Returns the end, in floats. */
static int frag(int *fm, int off, int K, int N, int E, int bf16, const b_source *s)
{
    if (bf16) {
        int Kp = round16(K);
        if (fm)
            for (int kt = 0; kt < Kp / 16; kt++)
                for (int nt = 0; nt < N / 8; nt++)
                    for (int l = 0; l < 32; l++)
                        for (int e = 0; e < 4; e++) {
                            int k = 16 * kt + 2 * (l % 4) + (e & 1) + 8 * (e >> 1);
                            int n = 8 * nt + l / 4;
                            fm[2 * off + ((kt * (N / 8) + nt) * 32 + l) * 4 + e] =
                                k < K ? b_at(s, k, n) : -1;
                        }
        return off + Kp * N / 2; /* 128 bf16 a tile, 64 floats */
    }
    if (fm)
        for (int kt = 0; kt < K / 8; kt++)
            for (int nt = 0; nt < N / 8; nt++)
                for (int l = 0; l < 32; l++)
                    for (int e = 0; e < E; e++) {
                        int k = 8 * kt + l % 4 + (e & 1) * 4, n = 8 * nt + l / 4;
                        fm[off + ((kt * (N / 8) + nt) * 32 + l) * E + e] = b_at(s, k, n);
                    }
    return off + K * N * E / 2; /* 64 elements a tile, 32·E floats */
}

void vx_af_layout(const vx_qnet_layout *L, int acting, vx_af_net *t, int *map)
{
    const vx_qnet_cfg *c = &L->cfg;
    memset(t, 0, sizeof *t);
    t->bf16 = acting == VX_ACTING_BF16;
    t->E = acting == VX_ACTING_TF32X3 ? 4 : 2;
    t->pad = t->bf16 ? 8 : 4;
    t->in = c->in_dim, t->Dp = round16(c->in_dim);
    t->n = c->n_trunk;
    for (int l = 0; l < t->n; l++) t->H[l] = c->trunk[l];
    t->Hh = c->head_hidden, t->G = 1 + c->n_branches;
    t->nb = c->n_branches, t->Z = c->atoms, t->out_dim = L->out_dim;
    for (int d = 0; d < t->nb; d++) t->branch[d] = c->branch[d], t->out_off[d] = L->out_offset[d];
    for (int g = 0; g < t->G; g++) {
        t->N2[g] = g ? c->branch[g - 1] * c->atoms : c->atoms;
        t->P2[g] = round8(t->N2[g]);
        t->o2[g] = t->W2;
        t->W2 += t->P2[g];
    }
    /* the packed biases */
    int off = 0;
    for (int l = 0; l < t->n; l++) {
        t->b[l] = off;
        for (int j = 0; j < t->H[l]; j++)
            if (map) map[off + j] = (int)(L->trunk[l].b + (size_t)j);
        off = round8(off + t->H[l]);
    }
    t->bh1 = off;
    for (int j = 0; j < t->G * t->Hh; j++)
        if (map) map[off + j] = (int)(head1(L, j / t->Hh)->b + (size_t)(j % t->Hh));
    off = round8(off + t->G * t->Hh);
    t->bh2 = off;
    for (int g = 0; g < t->G; g++)
        for (int j = 0; j < t->P2[g]; j++)
            if (map)
                map[off + t->o2[g] + j] = j < t->N2[g] ? (int)(head2(L, g)->b + (size_t)j) : -1;
    off = round8(off + t->W2);
    t->packed = off;
    /* the fragments, after the packed floats in the map */
    int E = t->E, bf = t->bf16, f = 0;
    int *fm = map ? map + t->packed : NULL;
    for (int l = 0; l < t->n; l++) {
        b_source s = {L, 0, &L->trunk[l], l ? t->H[l - 1] : t->in, 0};
        t->fw[l] = f;
        f = frag(fm, f, l ? t->H[l - 1] : t->Dp, t->H[l], E, bf, &s);
    }
    b_source s1 = {L, 1, NULL, 0, t->Hh};
    t->fh1 = f;
    f = frag(fm, f, t->H[t->n - 1], t->G * t->Hh, E, bf, &s1);
    for (int g = 0; g < t->G; g++) {
        b_source s2 = {L, 0, head2(L, g), t->Hh, 0};
        t->fh2[g] = f;
        f = frag(fm, f, t->Hh, t->P2[g], E, bf, &s2);
    }
    t->frags = f;
    t->maps = t->packed + (bf ? 2 : 1) * f;
}

/* A block's buffers (floats), each on 8 floats: the input rows, each trunk layer's activations,
 * the heads' first layers', the heads' outputs, the rows' Q-values, the rows' acting picks (each
 * activation row pad floats past a multiple of 16: row-major loads of A free of bank conflicts —
 * TF32's single floats at 4, BF16's pairs at 8). */
size_t vx_af_smem(const vx_af_net *t)
{
    size_t R = VX_AF_ROWS, pad = (size_t)t->pad;
    size_t f = R * (size_t)(t->Dp + pad);
    for (int l = 0; l < t->n; l++) f += R * (size_t)(round16(t->H[l]) + pad);
    f += R * (size_t)(round16(t->G * t->Hh) + pad);
    f += R * (size_t)(t->W2 + 4);
    f += R * (size_t)round8(t->out_dim);
    f += R * (size_t)VX_AF_PICK;
    return f * 4;
}

int vx_af_fits(const vx_qnet_layout *L, int acting, size_t smem_optin, char *why, size_t why_n)
{
    const vx_qnet_cfg *c = &L->cfg;
    const char *no = NULL;
    if (c->n_trunk < 1) no = "a trunk of no layers";
    else if (c->head_hidden % 8) no = "a head width that is not a multiple of 8";
    else if (L->n_params > (size_t)1 << 30) no = "too many parameters";
    for (int l = 0; !no && l < c->n_trunk; l++)
        if (c->trunk[l] % 8) no = "trunk widths that are not multiples of 8";
    if (!no) {
        vx_af_net t;
        vx_af_layout(L, acting, &t, NULL);
        if ((size_t)t.maps > (size_t)1 << 30) no = "too many parameters";
        else if (vx_af_smem(&t) > smem_optin) no = "a network too wide for shared memory";
    }
    if (no && why) snprintf(why, why_n, "%s", no);
    return !no;
}

size_t vx_af_bytes(const vx_qnet_layout *L, int acting)
{
    vx_af_net t;
    vx_af_layout(L, acting, &t, NULL);
    /* the copies, and their map */
    return ((size_t)t.packed + (size_t)t.frags) * 4 + (size_t)t.maps * 4;
}
