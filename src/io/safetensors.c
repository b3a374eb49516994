/* safetensors.c — checkpoints in the safetensors format (Hugging Face): an 8-byte little-endian
 * header length N, N bytes of JSON, then the tensors' bytes back to back. The JSON maps each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the end of
 * the header) and "__metadata__" to a map of strings. cJSON (Debian's libcjson) writes and reads
 * the header; the reader checks every offset against the file before handing out a pointer. */
#include "vixen/io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *dt_name[4] = {"F32", "F64", "I64", "U8"};
static const size_t dt_size[4] = {4, 8, 8, 1};

static size_t count_of(const vx_tensor *t)
{
    size_t c = 1;
    for (int i = 0; i < t->ndim; i++) c *= (size_t)t->shape[i];
    return c;
}

vx_status vx_safetensors_write(const char *path, const vx_tensor *t, size_t n, const vx_meta *meta,
                               size_t n_meta, vx_err *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(root, "__metadata__");
    for (size_t i = 0; i < n_meta; i++) cJSON_AddStringToObject(md, meta[i].key, meta[i].value);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(root, t[i].name);
        cJSON_AddStringToObject(o, "dtype", dt_name[t[i].dtype]);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int k = 0; k < t[i].ndim; k++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[k]));
        size_t bytes = count_of(&t[i]) * dt_size[t[i].dtype];
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return vx_err_set(e, VX_ERR_NOMEM, "%s: cannot build the header", path);
    size_t hl = strlen(json), padded = (hl + 7) & ~(size_t)7; /* tensors start 8-aligned */
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) {
        free(json);
        return st;
    }
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int bad = fwrite(len, 1, 8, af.f) != 8 || fwrite(json, 1, hl, af.f) != hl;
    for (size_t i = hl; i < padded && !bad; i++) bad = fputc(' ', af.f) == EOF;
    free(json);
    for (size_t i = 0; i < n && !bad; i++) {
        size_t bytes = count_of(&t[i]) * dt_size[t[i].dtype];
        bad = bytes && fwrite(t[i].data, 1, bytes, af.f) != bytes;
    }
    if (bad) {
        vx_atomic_abort(&af);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
    }
    return vx_atomic_commit(&af, e);
}

void vx_safetensors_free(vx_safetensors *s)
{
    free(s->file);
    free(s->tensors);
    free(s->meta);
    memset(s, 0, sizeof *s);
}

vx_status vx_safetensors_read(const char *path, vx_safetensors *s, vx_err *e)
{
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    vx_status st = vx_file_read_all(path, &s->file, &s->size, e);
    if (st) return st;
    uint64_t hl = 0;
    if (s->size >= 8)
        for (int i = 0; i < 8; i++) hl |= (uint64_t)s->file[i] << (8 * i);
    if (s->size < 8 || hl > s->size - 8) {
        vx_safetensors_free(s);
        return vx_err_record(e, VX_ERR_FORMAT, path, -1, 0, "header_length",
                             "not a safetensors file (header length beyond the file)");
    }
    cJSON *root = cJSON_ParseWithLength((const char *)s->file + 8, (size_t)hl);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        vx_safetensors_free(s);
        return vx_err_record(e, VX_ERR_FORMAT, path, -1, 8, "header", "header is not JSON");
    }
    size_t n = (size_t)cJSON_GetArraySize(root);
    s->tensors = calloc(n ? n : 1, sizeof *s->tensors);
    s->meta = calloc(16, sizeof *s->meta);
    const uint8_t *data = s->file + 8 + hl;
    size_t data_len = s->size - 8 - (size_t)hl;
    cJSON *it;
    st = VX_OK;
    cJSON_ArrayForEach(it, root)
    {
        if (st) break;
        if (strcmp(it->string, "__metadata__") == 0) {
            cJSON *m;
            cJSON_ArrayForEach(m, it)
            {
                if (s->n_meta < 16 && cJSON_IsString(m)) {
                    snprintf(s->meta[s->n_meta].key, sizeof s->meta[0].key, "%s", m->string);
                    snprintf(s->meta[s->n_meta].value, sizeof s->meta[0].value, "%s",
                             m->valuestring);
                    s->n_meta++;
                }
            }
            continue;
        }
        vx_tensor *t = &s->tensors[s->n];
        snprintf(t->name, sizeof t->name, "%s", it->string);
        cJSON *dt = cJSON_GetObjectItem(it, "dtype"), *sh = cJSON_GetObjectItem(it, "shape"),
              *of = cJSON_GetObjectItem(it, "data_offsets");
        int k = -1;
        for (int d = 0; dt && cJSON_IsString(dt) && d < 4; d++)
            if (strcmp(dt->valuestring, dt_name[d]) == 0) k = d;
        if (k < 0 || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 4 || !cJSON_IsArray(of) ||
            cJSON_GetArraySize(of) != 2) {
            st = vx_err_record(e, VX_ERR_FORMAT, path, -1, 8, it->string,
                               "bad tensor entry (dtype, shape or data_offsets)");
            break;
        }
        t->dtype = (vx_dtype)k;
        t->ndim = cJSON_GetArraySize(sh);
        for (int d = 0; d < t->ndim; d++)
            t->shape[d] = (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
        double b0 = cJSON_GetArrayItem(of, 0)->valuedouble,
               b1 = cJSON_GetArrayItem(of, 1)->valuedouble;
        size_t want = count_of(t) * dt_size[k];
        if (b0 < 0 || b1 < b0 || b1 > (double)data_len || (size_t)(b1 - b0) != want) {
            st =
                vx_err_record(e, VX_ERR_FORMAT, path, -1, 8, it->string,
                              "data_offsets [%.0f, %.0f] do not fit the file or the shape", b0, b1);
            break;
        }
        t->data = data + (size_t)b0;
        s->n++;
    }
    cJSON_Delete(root);
    if (st) vx_safetensors_free(s);
    return st;
}

const vx_tensor *vx_safetensors_get(const vx_safetensors *s, const char *name, vx_dtype dt,
                                    size_t count, vx_err *e)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->tensors[i].name, name) != 0) continue;
        if (s->tensors[i].dtype != dt || count_of(&s->tensors[i]) != count) {
            vx_err_set(e, VX_ERR_FORMAT,
                       "checkpoint tensor '%s' is %s with %zu elements; expected %s with %zu", name,
                       dt_name[s->tensors[i].dtype], count_of(&s->tensors[i]), dt_name[dt], count);
            return NULL;
        }
        return &s->tensors[i];
    }
    vx_err_set(e, VX_ERR_NOT_FOUND, "checkpoint has no tensor '%s'", name);
    return NULL;
}

const char *vx_safetensors_meta(const vx_safetensors *s, const char *key)
{
    for (size_t i = 0; i < s->n_meta; i++)
        if (strcmp(s->meta[i].key, key) == 0) return s->meta[i].value;
    return NULL;
}

vx_status vx_safetensors_meta_int(const vx_safetensors *s, const char *key, int64_t lo, int64_t hi,
                                  int64_t *out, vx_err *e)
{
    const char *v = vx_safetensors_meta(s, key);
    if (!v) return vx_err_line(e, VX_ERR_FORMAT, s->path, -1, key, "missing from the metadata");
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return vx_err_line(e, VX_ERR_FORMAT, s->path, -1, key,
                           "'%.40s' is not a whole number in %lld..%lld", v, (long long)lo,
                           (long long)hi);
    *out = x;
    return VX_OK;
}
