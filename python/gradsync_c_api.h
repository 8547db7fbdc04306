// gradsync's C API: the strategies behind PyTorch's DDP hook, for ctypes.
//
// One shared library (//python:libgradsync_c.so) serves every Python
// interpreter and every torch build: what crosses this boundary is plain C
// (buffer addresses and lengths, numbers, NUL-terminated strings), never a
// Python or torch object, so nothing here depends on CPython's ABI or on
// torch's C++ ABI. gradsync/_library.py loads it with ctypes (which releases
// the GIL for the length of every call) and wraps it as
// gradsync.extension.TorchWorker.
//
// Errors: every function that can fail returns 0 on success and -1 on
// failure; the failure's message (what, where, what to do) is then
// gradsync_last_error(), kept per calling thread until that thread's next
// call. No C++ exception crosses the boundary: each entry point catches
// whatever its body throws and turns it into such an error.
//
// Strings returned by the library (const char*) belong to it: a worker's
// strings stay valid until the next call on the same worker, the others for
// the life of the process.
//
// Thread safety: a worker is used by one thread at a time (DDP calls the
// hook from backward's thread; close() and the figures come from the
// program's thread between steps). Different workers are independent.
#ifndef GRADSYNC_PYTHON_GRADSYNC_C_API_H_
#define GRADSYNC_PYTHON_GRADSYNC_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRADSYNC_EXPORT __attribute__((visibility("default")))

// Bumped whenever a signature below changes; the Python side refuses a
// library of another version (a stale build) with one clear error.
#define GRADSYNC_C_API_VERSION 2

typedef struct gradsync_worker gradsync_worker;

GRADSYNC_EXPORT int gradsync_api_version(void);

// The message of this thread's last failed call ("" if none failed).
GRADSYNC_EXPORT const char* gradsync_last_error(void);

// The --sync names this build has, comma-separated ("allreduce,local,ps,...").
GRADSYNC_EXPORT const char* gradsync_strategies(void);

// Joins the job (identity from the environment: torchrun's RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or gradsync launch's) with strategy
// `sync` and its `num_flags` flags ("--name=value"), and starts the run
// record. Waits on peers (at most timeout_s each). On success *worker is the
// new worker, to be released with gradsync_worker_destroy.
GRADSYNC_EXPORT int gradsync_worker_create(
    const char* sync, double timeout_s, const char* const* flags, int num_flags,
    const char* metrics_dir, const char* trace_path, int64_t trace_steps,
    int64_t warmup_steps, int64_t batch_size, const char* model,
    int64_t total_steps, gradsync_worker** worker);

// DDP bucket `index`: `numel` contiguous floats at `data` (host memory,
// the worker's until the step ends), made of `num_params` parameters given as
// (param_keys[i], param_numels[i]); is_last: DDP's last bucket of the step.
// *step_ended is 1 when this call ended the step: every bucket handed over
// in it then holds the average over the workers. A failure also leaves the
// job (the other workers stop at once, naming this one).
GRADSYNC_EXPORT int gradsync_worker_add_bucket(
    gradsync_worker* worker, int index, void* data, int64_t numel,
    const int64_t* param_keys, const int64_t* param_numels, int64_t num_params,
    int is_last, int* step_ended);

// DDP's bucket caps (first bucket, the others), from which the strategy's
// buckets are derived after the first step (ddp_bucket_sync.h).
GRADSYNC_EXPORT int gradsync_worker_set_bucket_caps(gradsync_worker* worker,
                                                    int64_t first_bucket_bytes,
                                                    int64_t bucket_bytes);

// The order the first step's gradients became ready (parameter keys).
GRADSYNC_EXPORT int gradsync_worker_set_ready_order(gradsync_worker* worker,
                                                    const int64_t* keys,
                                                    int64_t num_keys);

GRADSYNC_EXPORT int gradsync_worker_set_loss(gradsync_worker* worker,
                                             double loss);

// The device's forward + backward of the step in progress, from events on
// the device (gradsync/device_timing.py: CUDA events), for its compute_ms;
// not called, the step keeps the host's rule (step_ms - sync_wait_ms).
// Refused when negative or not finite.
GRADSYNC_EXPORT int gradsync_worker_set_device_compute_ms(
    gradsync_worker* worker, double compute_ms);

// Leaves the job with `message` (the others stop, naming this worker).
GRADSYNC_EXPORT int gradsync_worker_fail(gradsync_worker* worker,
                                         const char* message);

// The strategy's end, this worker's part of the run record, the job's end.
GRADSYNC_EXPORT int gradsync_worker_close(gradsync_worker* worker);

// Releases the worker (shutting its strategy down if close was not called).
GRADSYNC_EXPORT void gradsync_worker_destroy(gradsync_worker* worker);

GRADSYNC_EXPORT int gradsync_worker_rank(const gradsync_worker* worker);
GRADSYNC_EXPORT int gradsync_worker_world_size(const gradsync_worker* worker);
GRADSYNC_EXPORT int gradsync_worker_num_servers(const gradsync_worker* worker);
GRADSYNC_EXPORT const char* gradsync_worker_sync(gradsync_worker* worker);
// The strategy's buckets, one per line ("" before the first step's end).
GRADSYNC_EXPORT const char* gradsync_worker_layout(gradsync_worker* worker);
GRADSYNC_EXPORT const char* gradsync_worker_summary_json(
    gradsync_worker* worker);
// The last step as one JSON object: step, step_ms, sync_wait_ms, bytes_sent,
// bytes_recv and the strategy's own figures.
GRADSYNC_EXPORT const char* gradsync_worker_last_step_json(
    gradsync_worker* worker);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // GRADSYNC_PYTHON_GRADSYNC_C_API_H_
