/* A C program using fp8c's C API (include/fp8c.h), for tests/capi.rs.
 *
 *   run_model MODEL INPUT DTYPE DIMS IN.bin OUT.bin [OPTION=VALUE ...]
 *       loads MODEL, compiles it for that input shape with the options (fp8c compile's flag
 *       names), runs it on the raw little-endian array IN.bin given as input INPUT (DTYPE f32
 *       or i64, DIMS like 16x64), writes the first output's raw bytes to OUT.bin and prints its
 *       name, dtype and shape.
 *   run_model --bad MODEL
 *       expects loading MODEL to fail: prints the status and the message, exits 0 if it did.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8c.h"

static int fail(const char *what, Fp8cStatus s) {
    fprintf(stderr, "%s: status %d: %s\n", what, (int)s, fp8c_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--bad") == 0) {
        Fp8cModel *model = NULL;
        Fp8cStatus s = fp8c_model_load(argv[2], &model);
        if (s == FP8C_STATUS_OK || model != NULL) {
            fprintf(stderr, "a bad model loaded\n");
            return 1;
        }
        printf("status %d: %s\n", (int)s, fp8c_last_error());
        return strlen(fp8c_last_error()) > 0 ? 0 : 1;
    }
    if (argc < 7) {
        fprintf(stderr, "usage: run_model MODEL INPUT DTYPE DIMS IN.bin OUT.bin [OPTION=VALUE ...]\n");
        return 2;
    }
    /* The input's shape as a compile option ("x=16x64"), as `fp8c run` binds it from the
     * array it is given. */
    char input_shape[256];
    snprintf(input_shape, sizeof input_shape, "%s=%s", argv[2], argv[4]);
    int64_t shape[8];
    size_t rank = 0, count = 1;
    for (char *d = strtok(argv[4], "x"); d != NULL && rank < 8; d = strtok(NULL, "x")) {
        shape[rank] = atoll(d);
        count *= (size_t)shape[rank++];
    }
    uint32_t dtype = strcmp(argv[3], "i64") == 0 ? FP8C_DTYPE_I64 : FP8C_DTYPE_F32;
    size_t nbytes = count * (dtype == FP8C_DTYPE_I64 ? 8 : 4);
    void *data = malloc(nbytes);
    FILE *in = fopen(argv[5], "rb");
    if (in == NULL || fread(data, 1, nbytes, in) != nbytes) {
        fprintf(stderr, "cannot read %zu bytes from %s\n", nbytes, argv[5]);
        return 1;
    }
    fclose(in);

    Fp8cModel *model = NULL;
    Fp8cStatus s = fp8c_model_load(argv[1], &model);
    if (s != FP8C_STATUS_OK) return fail("load", s);
    Fp8cOptions *options = fp8c_options_new();
    s = fp8c_options_set(options, "input-shape", input_shape);
    if (s != FP8C_STATUS_OK) return fail("option", s);
    for (int i = 7; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "option %s: expected KEY=VALUE\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        s = fp8c_options_set(options, argv[i], eq + 1);
        if (s != FP8C_STATUS_OK) return fail("option", s);
    }
    Fp8cCompiled *compiled = NULL;
    s = fp8c_compile(model, options, &compiled);
    if (s != FP8C_STATUS_OK) return fail("compile", s);
    Fp8cRunner *runner = NULL;
    s = fp8c_runner_new(compiled, "cpu", &runner);
    if (s != FP8C_STATUS_OK) return fail("prepare", s);

    Fp8cTensor input = {argv[2], dtype, rank, shape, data, nbytes};
    s = fp8c_run(runner, &input, 1);
    if (s != FP8C_STATUS_OK) return fail("run", s);
    if (fp8c_output_count(runner) < 1) {
        fprintf(stderr, "no outputs\n");
        return 1;
    }
    Fp8cTensor out;
    s = fp8c_output(runner, 0, &out);
    if (s != FP8C_STATUS_OK) return fail("output", s);
    FILE *f = fopen(argv[6], "wb");
    if (f == NULL || fwrite(out.data, 1, out.nbytes, f) != out.nbytes) {
        fprintf(stderr, "cannot write %s\n", argv[6]);
        return 1;
    }
    fclose(f);
    printf("%s dtype %u shape", out.name, out.dtype);
    for (size_t i = 0; i < out.rank; i++) printf(" %lld", (long long)out.shape[i]);
    printf("\n");

    /* A second run with a wrong shape fails with a message naming the input. */
    int64_t bad_shape[8];
    memcpy(bad_shape, shape, sizeof shape);
    bad_shape[0] += 1;
    Fp8cTensor bad = {argv[2], dtype, rank, bad_shape, data, nbytes};
    s = fp8c_run(runner, &bad, 1);
    if (s == FP8C_STATUS_OK || strstr(fp8c_last_error(), argv[2]) == NULL) {
        fprintf(stderr, "a wrong shape was not refused (status %d: %s)\n", (int)s, fp8c_last_error());
        return 1;
    }
    printf("wrong shape: status %d: %s\n", (int)s, fp8c_last_error());

    fp8c_runner_free(runner);
    fp8c_compiled_free(compiled);
    fp8c_options_free(options);
    fp8c_model_free(model);
    free(data);
    return 0;
}
