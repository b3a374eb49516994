/* ppo_fused_plan.c — the fused kernels' packed layout and sizes (ppo_fused_plan.h). */
#include "ppo_fused_plan.h"
#include "vixen/ppo_math.h"

#include <stdio.h>
#include <string.h>

static int round8(int n) { return (n + 7) & ~7; }

/* Writes map[i] = v when there is a map. */
static void put(int *map, int i, int v)
{
    if (map) map[i] = v;
}

/* Layer l of trunk g (0: the policy's; 1: the value's). */
static const vx_dense *trunk(const vx_ac_layout *L, int g, int l)
{
    return g ? &L->v[l] : &L->pi[l];
}

size_t vx_pf_layout(const vx_ac_layout *L, vx_pf_net *t, int *src)
{
    const vx_ac_cfg *c = &L->cfg;
    memset(t, 0, sizeof *t);
    t->in = c->in_dim, t->Dp = (c->in_dim + 15) & ~15;
    t->n = c->n_trunk, t->G = c->shared ? 1 : 2;
    for (int l = 0; l < t->n; l++) {
        t->H[l] = c->trunk[l], t->W[l] = t->G * c->trunk[l];
        t->g[l] = l ? t->G : 1, t->dscale[l] = 1;
    }
    int G = t->G, off = 0;
    /* layer 0: [W_pi | W_v], the rows past the input zero */
    int H0 = t->H[0], W0 = G * H0;
    t->w[0] = off;
    for (int i = 0; i < t->Dp; i++)
        for (int k = 0; k < W0; k++)
            put(src, off + i * W0 + k,
                i < t->in ? (int)(trunk(L, k / H0, 0)->w + (size_t)i * H0 + k % H0) : -1);
    off = round8(off + t->Dp * W0);
    for (int l = 0; l < t->n; l++) {
        int H = t->H[l];
        if (l > 0) { /* a block a trunk, each as the flat vector holds it */
            int n = t->H[l - 1] * H;
            t->w[l] = off, t->w_step[l] = round8(n);
            for (int g = 0; g < G; g++)
                for (int k = 0; k < t->w_step[l]; k++)
                    put(src, off + g * t->w_step[l] + k,
                        k < n ? (int)(trunk(L, g, l)->w + (size_t)k) : -1);
            off += G * t->w_step[l];
        }
        t->b[l] = off;
        for (int k = 0; k < round8(G * H); k++)
            put(src, off + k, k < G * H ? (int)(trunk(L, k / H, l)->b + (size_t)(k % H)) : -1);
        off += round8(G * H);
    }
    /* the heads: the logits from the policy trunk's rows, the value from the value trunk's (both
     * from every row of a shared trunk) */
    int Ht = t->H[t->n - 1];
    t->top = G * Ht;
    t->wh = off;
    for (int i = 0; i < t->top; i++)
        for (int k = 0; k < VX_PF_HEAD; k++) {
            int v = -1, pi_row = G == 1 || i < Ht, v_row = G == 1 || i >= Ht;
            if (k < VX_PPO_LOGITS && pi_row)
                v = (int)(L->pi_head.w + (size_t)i * VX_PPO_LOGITS + k);
            if (k == VX_PPO_LOGITS && v_row) v = (int)(L->v_head.w + (size_t)(G == 1 ? i : i - Ht));
            put(src, off + i * VX_PF_HEAD + k, v);
        }
    off += t->top * VX_PF_HEAD;
    t->bh = off;
    for (int k = 0; k < VX_PF_HEAD; k++)
        put(src, off + k, k < VX_PPO_LOGITS ? (int)(L->pi_head.b + (size_t)k) : (int)L->v_head.b);
    off += VX_PF_HEAD;
    return (size_t)round8(off);
}

/* One K × N matrix B in fragment order from off: its 8 × 8 tiles row by row (tile (kt, nt) at
 * (kt·N/8 + nt)·32·E), in a tile lane l's share at l·E: B(t, g) and B(t + 4, g) with g = l / 4,
 * t = l % 4 — as they are (E = 2), or their big parts then their small parts (E = 4: the two
 * floats' maps repeat). B(k, n) is the packed float base + k·sk + n·sn. Returns the end. */
static int frag(int *fsrc, const int *src, int off, int K, int N, int E, int base, int sk, int sn)
{
    if (fsrc)
        for (int kt = 0; kt < K / 8; kt++)
            for (int nt = 0; nt < N / 8; nt++)
                for (int l = 0; l < 32; l++)
                    for (int e = 0; e < E; e++) {
                        int k = 8 * kt + l % 4 + (e & 1) * 4, n = 8 * nt + l / 4;
                        fsrc[off + ((kt * (N / 8) + nt) * 32 + l) * E + e] =
                            src[base + k * sk + n * sn];
                    }
    return off + K * N * E / 2; /* 64 elements a tile, 32·E floats */
}

/* Layer l's product: a group's K (the inputs it reads) and N (the columns it writes). */
static void layer_kn(const vx_pf_net *t, int l, int *K, int *N)
{
    *K = l ? t->H[l - 1] : t->Dp;
    *N = l ? t->H[l] : t->W[0];
}

size_t vx_pf_frags(vx_pf_net *t, int passes, const int *src, int *fsrc)
{
    int E = passes == 3 ? 4 : 2, off = 0, K, N;
    t->E = E;
    /* forward: B = W (K the layer's inputs), a group's matrix after the other */
    for (int l = 0; l < t->n; l++) {
        layer_kn(t, l, &K, &N);
        t->fw[l] = off, t->f_step[l] = K * N * E / 2;
        for (int i = 0; i < (l ? t->g[l] : 1); i++)
            off = frag(fsrc, src, off, K, N, E, t->w[l] + i * t->w_step[l], N, 1);
    }
    t->fwh = off;
    off = frag(fsrc, src, off, t->top, VX_PF_HEAD, E, t->wh, VX_PF_HEAD, 1);
    /* backward: B = Wᵀ (K the layer's outputs); layer 0's is never needed */
    t->fbh = off;
    off = frag(fsrc, src, off, VX_PF_HEAD, t->top, E, t->wh, 1, VX_PF_HEAD);
    for (int l = 1; l < t->n; l++) {
        layer_kn(t, l, &K, &N);
        t->fb[l] = off;
        for (int i = 0; i < t->g[l]; i++)
            off = frag(fsrc, src, off, N, K, E, t->w[l] + i * t->w_step[l], 1, N);
    }
    return (size_t)off;
}

size_t vx_pf_smem(const vx_pf_net *t, int rows)
{
    size_t R = (size_t)rows;
    /* a double a thread for block sums, the warps' staging, the heads' outputs, the input rows,
     * every layer's activations (each row VX_PF_PAD floats past its width), the rows' samples */
    size_t f =
        2 * VX_PF_THREADS + VX_PF_WARPS * 256 + R * VX_PF_OUT_LD + R * (size_t)(t->Dp + VX_PF_PAD);
    for (int l = 0; l < t->n; l++) f += R * (size_t)(t->W[l] + VX_PF_PAD);
    return (f + (size_t)round8(rows)) * 4;
}

int vx_pf_rows(const vx_ac_layout *L, size_t smem_optin, char *why, size_t why_n)
{
    const vx_ac_cfg *c = &L->cfg;
    const char *no = NULL;
    if (c->n_trunk < 1) no = "a trunk of no layers";
    else if (c->n_logits != VX_PPO_LOGITS) no = "other heads";
    else if (c->in_dim > VX_PF_MAX_IN) no = "an input wider than 128";
    else if (L->n_params > (size_t)1 << 30) no = "too many parameters";
    for (int l = 0; !no && l < c->n_trunk; l++)
        if (c->trunk[l] % 16) no = "trunk widths that are not multiples of 16";
    int rows = 64;
    if (!no) {
        vx_pf_net t;
        vx_pf_layout(L, &t, NULL);
        if ((size_t)t.top * VX_PF_HEAD > (size_t)1 << 30) no = "too many parameters";
        while (!no && rows > 32 && vx_pf_smem(&t, rows) > smem_optin) rows /= 2;
        /* and a rollout step's block: its rows and as many pre-reset ones */
        if (!no &&
            (vx_pf_smem(&t, rows) > smem_optin || vx_pf_smem(&t, 2 * VX_PF_ACT_ROWS) > smem_optin))
            no = "trunks too wide for shared memory";
    }
    if (no && why) snprintf(why, why_n, "%s", no);
    return no ? 0 : rows;
}

size_t vx_pf_sum_blocks(size_t packed, size_t n_params)
{
    return ((packed > n_params ? packed : n_params) + 255) / 256;
}

size_t vx_pf_bytes(const vx_ac_layout *L, int rows, int max_rows, int tf32)
{
    vx_pf_net t;
    size_t packed = vx_pf_layout(L, &t, NULL), slices = (size_t)(max_rows + rows - 1) / rows;
    size_t frags = vx_pf_frags(&t, tf32 ? 1 : 3, NULL, NULL);
    /* the packed weights and their map, the fragment copies and theirs, the inverse map (3 ints a
     * parameter), each block's gradient slice (laid out as the packed weights), the norm's
     * partial sums and two counters */
    return packed * 8 + frags * 8 + L->n_params * 12 + slices * packed * 4 +
           vx_pf_sum_blocks(packed, L->n_params) * 8 + 64;
}
