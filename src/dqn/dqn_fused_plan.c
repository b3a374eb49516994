/* dqn_fused_plan.c — the DQN's fused update's packed layout and sizes (dqn_fused_plan.h). */
#include "dqn_fused_plan.h"
#include "vixen/dqn_loss.h"

#include <stdio.h>
#include <string.h>

static int round8(int n) { return (n + 7) & ~7; }

/* Writes map[i] = v when there is a map. */
static void put(int *map, int i, int v)
{
    if (map) map[i] = v;
}

/* Head q's layers (q < branches: branch q's advantages; q = branches: the value). */
static const vx_dense *head1(const vx_qnet_layout *L, int q)
{
    return q < L->cfg.n_branches ? &L->adv1[q] : &L->value1;
}

size_t vx_df_layout(const vx_qnet_layout *L, vx_pf_net *t, int *src)
{
    const vx_qnet_cfg *c = &L->cfg;
    int nb = c->n_branches, Hh = c->head_hidden, nt = c->n_trunk, off = 0;
    memset(t, 0, sizeof *t);
    t->in = c->in_dim, t->Dp = (c->in_dim + 15) & ~15;
    t->n = nt + 1, t->G = 1;
    for (int l = 0; l <= nt; l++) {
        t->W[l] = t->H[l] = l < nt ? c->trunk[l] : (nb + 1) * Hh;
        t->g[l] = 1, t->dscale[l] = 1;
    }
    /* BDQ: the trunk takes the heads' gradient scaled by 1 / (branches + 1) */
    t->dscale[nt] = 1.0f / (float)(nb + 1);
    for (int l = 0; l <= nt; l++) {
        int K = l ? t->W[l - 1] : t->Dp, N = t->W[l], Kin = l ? K : t->in;
        t->w[l] = off;
        for (int i = 0; i < K; i++)
            for (int k = 0; k < N; k++) {
                int v = -1;
                if (i < Kin && l < nt) v = (int)(L->trunk[l].w + (size_t)i * N + k);
                else if (i < Kin) v = (int)(head1(L, k / Hh)->w + (size_t)i * Hh + k % Hh);
                put(src, off + i * N + k, v);
            }
        off = round8(off + K * N);
        t->b[l] = off;
        for (int k = 0; k < round8(N); k++) {
            int v = -1;
            if (k < N) v = l < nt ? (int)(L->trunk[l].b + k) : (int)(head1(L, k / Hh)->b + k % Hh);
            put(src, off + k, v);
        }
        off += round8(N);
    }
    /* the output product: head q's columns from head q's hidden rows only */
    t->top = t->W[nt];
    t->wh = off;
    for (int i = 0; i < t->top; i++)
        for (int k = 0; k < VX_PF_HEAD; k++) {
            int q = i / Hh, r = i % Hh, v = -1;
            if (k == L->out_dim && q == nb) v = (int)(L->value2.w + (size_t)r);
            for (int d = 0; d < nb; d++) {
                int k0 = L->out_offset[d], n = c->branch[d];
                if (q == d && k >= k0 && k < k0 + n)
                    v = (int)(L->adv2[d].w + (size_t)r * n + (k - k0));
            }
            put(src, off + i * VX_PF_HEAD + k, v);
        }
    off += t->top * VX_PF_HEAD;
    t->bh = off;
    for (int k = 0; k < VX_PF_HEAD; k++) {
        int v = k == L->out_dim ? (int)L->value2.b : -1;
        for (int d = 0; d < nb; d++)
            if (k >= L->out_offset[d] && k < L->out_offset[d] + c->branch[d])
                v = (int)(L->adv2[d].b + (k - L->out_offset[d]));
        put(src, off + k, v);
    }
    off += VX_PF_HEAD;
    return (size_t)round8(off);
}

size_t vx_df_smem(const vx_pf_net *t, int rows)
{
    /* the network's buffers, then the four Q row buffers */
    return vx_pf_smem(t, rows) + (size_t)4 * rows * VX_DF_QLD * 4;
}

/* Rows a block: 16, more while the batch would need more than 128 slices (at most 64 rows a
 * block, as far as shared memory allows: 32 for the default network); 0 past 1,024 slices (the
 * slices alone would take gigabytes). */
static int pick_rows(const vx_pf_net *t, int batch, size_t smem_optin)
{
    int rows = 16;
    while ((batch + rows - 1) / rows > 128 && rows < 64 && vx_df_smem(t, 2 * rows) <= smem_optin)
        rows *= 2;
    return (batch + rows - 1) / rows > 1024 ? 0 : rows;
}

int vx_df_rows(const vx_qnet_layout *L, int loss, int batch, size_t smem_optin, char *why,
               size_t why_n)
{
    const vx_qnet_cfg *c = &L->cfg;
    const char *no = NULL;
    int rows = 0;
    if (loss == VX_LOSS_C51 || c->atoms != 1) no = "a distributional loss (C51)";
    else if (c->n_trunk < 1) no = "a trunk of no layers";
    else if (c->n_trunk + 1 > VX_PF_MAX_LAYERS) no = "a trunk of more than 3 layers";
    else if (L->out_dim + 1 > VX_PF_HEAD) no = "more than 15 actions over the branches";
    else if (L->n_params > (size_t)1 << 30) no = "too many parameters";
    else if ((c->n_branches + 1) * c->head_hidden % 16)
        no = "heads' hidden widths that do not fill tiles";
    else if ((size_t)(c->n_branches + 1) * c->head_hidden * VX_PF_HEAD > (size_t)1 << 30)
        no = "too many parameters";
    for (int l = 0; !no && l < c->n_trunk; l++)
        if (c->trunk[l] % 16) no = "trunk widths that are not multiples of 16";
    if (!no) {
        vx_pf_net t;
        vx_df_layout(L, &t, NULL);
        rows = pick_rows(&t, batch, smem_optin);
        if (!rows) no = "a batch that needs more than 1,024 gradient slices";
        else if (vx_df_smem(&t, rows) > smem_optin) no = "layers too wide for shared memory";
    }
    if (no && why) snprintf(why, why_n, "%s", no);
    return no ? 0 : rows;
}

size_t vx_df_bytes(const vx_qnet_layout *L, int batch, int tf32)
{
    vx_pf_net t;
    size_t packed = vx_df_layout(L, &t, NULL);
    int rows = pick_rows(&t, batch, VX_PF_SMEM_HOPPER);
    size_t slices = rows ? (size_t)(batch + rows - 1) / (size_t)rows : 0;
    size_t frags = vx_pf_frags(&t, tf32 ? 1 : 3, NULL, NULL);
    /* the online and the target's packed and fragment copies, their maps, the inverse map (3
     * ints a parameter), each block's gradient slice, the norm's partial sums, two counters */
    return packed * 12 + frags * 12 + L->n_params * 12 + slices * packed * 4 +
           vx_pf_sum_blocks(packed, L->n_params) * 8 + 64;
}

/* ---- the layer-by-layer update ------------------------------------------------------------ */

#define PAD VX_PF_PAD

size_t vx_dl_fwd_floats(const vx_pf_net *t, const vx_dl_plan *p, int E, int l)
{
    /* the tile's input rows, its columns of the weights (fragments), its output */
    size_t K = (size_t)(l ? t->W[l - 1] : t->Dp);
    return p->rt * (K + PAD) + K * p->ct * E / 2 + p->rt * (size_t)(p->ct + PAD);
}

size_t vx_dl_dgrad_floats(const vx_pf_net *t, const vx_dl_plan *p, int E, int l)
{
    /* the gradient rows coming down, the weights' columns (transposed), the layer's activations
     * below, overwritten by the gradient */
    size_t K = (size_t)t->W[l];
    return p->rtb * (K + PAD) + K * p->ct * E / 2 + p->rtb * (size_t)(p->ct + PAD);
}

size_t vx_dl_loss_floats(const vx_pf_net *t)
{
    /* 16 rows: the heads' hidden rows of the three passes, their outputs, the split products'
     * stage, the four Q row buffers */
    return 3 * 16 * (size_t)(t->top + PAD) + 3 * 16 * VX_PF_OUT_LD + VX_PF_WARPS * 256 +
           4 * 16 * VX_DF_QLD;
}

size_t vx_dl_wgrad_floats(const vx_pf_net *t, const vx_dl_plan *p, int l)
{
    /* a chunk's input rows to layer l (l = n: the heads) and its gradient's columns */
    size_t K = (size_t)(l == 0 ? t->Dp : t->W[l - 1]), N = (size_t)(l == t->n ? VX_PF_HEAD : p->ct);
    return p->ch * (K + PAD) + p->ch * (N + PAD);
}

static size_t dl_smem(const vx_pf_net *t, const vx_dl_plan *p, int E)
{
    size_t most = vx_dl_loss_floats(t);
    for (int l = 0; l <= t->n; l++) {
        size_t f = vx_dl_wgrad_floats(t, p, l);
        if (l < t->n && vx_dl_fwd_floats(t, p, E, l) > f) f = vx_dl_fwd_floats(t, p, E, l);
        if (l >= 1 && l < t->n && vx_dl_dgrad_floats(t, p, E, l) > f)
            f = vx_dl_dgrad_floats(t, p, E, l);
        most = f > most ? f : most;
    }
    return most * 4;
}

int vx_dl_plan_make(const vx_pf_net *t, int passes, size_t smem_optin, vx_dl_plan *p)
{
    /* rows a forward tile: 96 makes 33 tiles of the three passes at a batch of 1,024, 132 with
     * 4 column tiles — an H100's or H200's SMs, one wave */
    static const int rts[] = {96, 64, 48, 32, 16}, chs[] = {128, 64, 32, 16};
    int E = passes == 3 ? 4 : 2;
    memset(p, 0, sizeof *p);
    p->ct = passes == 3 ? 32 : 64;
    for (size_t i = 0; i < sizeof rts / sizeof *rts; i++)
        for (size_t j = 0; j < sizeof chs / sizeof *chs; j++)
            for (int rtb = 32; rtb >= 16; rtb -= 16) {
                p->rt = rts[i], p->ch = chs[j], p->rtb = rtb;
                p->smem = dl_smem(t, p, E);
                if (p->smem <= smem_optin) return 1;
            }
    memset(p, 0, sizeof *p);
    return 0;
}

size_t vx_dl_act_floats(const vx_pf_net *t, int batch)
{
    size_t w = 0;
    for (int l = 0; l < t->n; l++) w += (size_t)t->W[l];
    return (size_t)batch * (4 * w + VX_PF_HEAD);
}

int vx_dl_chunks(const vx_dl_plan *p, int batch) { return (batch + p->ch - 1) / p->ch; }

size_t vx_dl_bytes(const vx_qnet_layout *L, int loss, int batch, int tf32)
{
    vx_pf_net t;
    vx_dl_plan p;
    if (vx_df_rows(L, loss, 16, VX_PF_SMEM_HOPPER, NULL, 0) <= 0) return 0;
    size_t packed = vx_df_layout(L, &t, NULL), frags = vx_pf_frags(&t, tf32 ? 1 : 3, NULL, NULL);
    if (!vx_dl_plan_make(&t, tf32 ? 1 : 3, VX_PF_SMEM_HOPPER, &p)) return 0;
    size_t slices = (size_t)vx_dl_chunks(&p, batch);
    /* as vx_df_bytes, with a slice a chunk, and the activations */
    return packed * 12 + frags * 12 + L->n_params * 12 + slices * packed * 4 +
           vx_pf_sum_blocks(packed, L->n_params) * 8 + 64 + vx_dl_act_floats(&t, batch) * 4;
}
