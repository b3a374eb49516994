/* run_folder.c — which run a run folder holds (checkpoint.h); who owns it is the folder lock of
 * util.h (vx_folder_lock), taken by run.c.
 *
 * The identity: <run>/run-id, 32 random hex digits written once when the run is created. Every
 * checkpoint carries it, so a checkpoint copied in from another run (or left by a second training
 * that raced into the folder before locks existed) is refused on resume instead of mixed in. */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

vx_status vx_run_id_create(const char *run_dir, char id[VX_RUN_ID_LEN + 1], vx_err *e)
{
    uint8_t raw[VX_RUN_ID_LEN / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return vx_err_set(e, VX_ERR_IO, "run identity: getrandom failed: %s", strerror(errno));
    for (size_t i = 0; i < sizeof raw; i++) snprintf(id + 2 * i, 3, "%02x", raw[i]);
    char path[1100];
    snprintf(path, sizeof path, "%s/run-id", run_dir);
    vx_atomic_file af;
    vx_status st = vx_atomic_open(&af, path, e);
    if (st) return st;
    if (fprintf(af.f, "%s\n", id) < 0) {
        vx_atomic_abort(&af);
        return vx_err_line(e, VX_ERR_IO, path, -1, "", "write failed");
    }
    return vx_atomic_commit(&af, e);
}

vx_status vx_run_id_read(const char *run_dir, char id[VX_RUN_ID_LEN + 1], vx_err *e)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/run-id", run_dir);
    uint8_t *text;
    size_t n;
    vx_status st = vx_file_read_all(path, &text, &n, e);
    if (st) {
        if (e) { /* say what it means for the user (the reason is copied: e is rewritten) */
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg);
            vx_err_line(e, st, path, -1, "",
                        "cannot read the run's identity (%s): not a run folder of this vixen "
                        "version, or damaged",
                        why);
        }
        return st;
    }
    int ok = n == VX_RUN_ID_LEN + 1 && text[VX_RUN_ID_LEN] == '\n';
    for (size_t i = 0; ok && i < VX_RUN_ID_LEN; i++)
        ok = (text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f');
    if (ok) memcpy(id, text, VX_RUN_ID_LEN), id[VX_RUN_ID_LEN] = '\0';
    free(text);
    if (!ok)
        return vx_err_line(e, VX_ERR_FORMAT, path, 1, "run-id", "not %d hex digits and a newline",
                           VX_RUN_ID_LEN);
    return VX_OK;
}
