/* yaml_flat.c — a YAML configuration of one nesting level, read with libyaml's event parser.
 *
 *   dqn:
 *     lr: 3.0e-4
 *     loss: huber
 *   net:
 *     trunk: [256, 256]
 *
 * gives ("dqn.lr", "3.0e-4"), ("dqn.loss", "huber"), ("net.trunk", "256,256"), each with its line.
 * What the keys mean and which values are allowed is decided by the caller's key table; this file
 * only refuses shapes it cannot flatten (deeper nesting, anchors, several documents). */
#include "vixen/io.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static vx_status fail(vx_err *e, const char *path, const yaml_event_t *ev, const char *what)
{
    return vx_err_line(e, VX_ERR_FORMAT, path, (int64_t)ev->start_mark.line + 1, "", "%s", what);
}

vx_status vx_yaml_read_flat(const char *path, vx_kv **out, size_t *n_out, vx_err *e)
{
    *out = NULL;
    *n_out = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return vx_err_line(e, VX_ERR_IO, path, -1, "", "cannot open");
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_file(&p, f);
    vx_kv *kv = NULL;
    size_t n = 0, cap = 0;
    char section[64] = "";
    /* states: TOP (before the top map), SECTION (expecting a section name), SECTION_MAP
     * (expecting its map), KEY (expecting a key), VALUE (expecting its value), LIST (in a list) */
    enum { TOP, SECTION, SECTION_MAP, KEY, VALUE, LIST } state = TOP;
    char key[64] = "";
    int docs = 0, key_line = 0;
    vx_status st = VX_OK;
    for (int done = 0; !done && !st;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            st = vx_err_line(e, VX_ERR_FORMAT, path, (int64_t)p.problem_mark.line + 1, "",
                             "YAML: %s", p.problem ? p.problem : "parse error");
            break;
        }
        const char *v = (const char *)ev.data.scalar.value;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = 1; break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) st = fail(e, path, &ev, "more than one YAML document");
            break;
        case YAML_MAPPING_START_EVENT:
            if (state == TOP) state = SECTION;
            else if (state == SECTION_MAP) state = KEY;
            else st = fail(e, path, &ev, "nested too deep: only 'section: {key: value}' is read");
            break;
        case YAML_MAPPING_END_EVENT: state = state == KEY ? SECTION : TOP; break;
        case YAML_SEQUENCE_START_EVENT:
            if (state != VALUE) {
                st = fail(e, path, &ev, "a list is only allowed as a key's value");
                break;
            }
            state = LIST; /* the list's entry is created empty by the scalar branch below */
            /* fall through */
        case YAML_SCALAR_EVENT:
            if (state == SECTION) {
                snprintf(section, sizeof section, "%.63s", v);
                state = SECTION_MAP;
            } else if (state == KEY) {
                snprintf(key, sizeof key, "%.63s", v);
                key_line = (int)ev.start_mark.line + 1;
                state = VALUE;
            } else if (state == VALUE || (state == LIST && ev.type == YAML_SEQUENCE_START_EVENT)) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 32;
                    vx_kv *nk = realloc(kv, cap * sizeof *nk);
                    if (!nk) {
                        st = vx_err_set(e, VX_ERR_NOMEM, "out of memory");
                        break;
                    }
                    kv = nk;
                }
                snprintf(kv[n].key, sizeof kv[n].key, "%s.%s", section, key);
                kv[n].line = key_line;
                kv[n].value[0] = '\0';
                if (state == VALUE) {
                    if (ev.data.scalar.length >= sizeof kv[n].value)
                        st = fail(e, path, &ev, "value too long");
                    else snprintf(kv[n].value, sizeof kv[n].value, "%s", v);
                    state = KEY;
                }
                n++;
            } else if (state == LIST) {
                vx_kv *last = &kv[n - 1];
                size_t cur = strlen(last->value);
                if (cur + ev.data.scalar.length + 2 >= sizeof last->value) {
                    st = fail(e, path, &ev, "list too long");
                    break;
                }
                if (cur) strcat(last->value, ",");
                strcat(last->value, v);
            } else {
                st = fail(e, path, &ev, "a section name must be followed by a map of keys");
            }
            break;
        case YAML_SEQUENCE_END_EVENT: state = KEY; break;
        case YAML_ALIAS_EVENT:
            st = fail(e, path, &ev, "anchors and aliases are not supported");
            break;
        default: break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    fclose(f);
    if (st) {
        free(kv);
        return st;
    }
    *out = kv;
    *n_out = n;
    return VX_OK;
}
