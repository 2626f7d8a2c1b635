/* run_corpus.c - a main() for fuzz_profile.c without libFuzzer: feeds each
 * file named on the command line (or every file of a directory) to
 * LLVMFuzzerTestOneInput once.  Lets any C compiler replay the committed
 * corpus and crash reproducers under AddressSanitizer / UBSan / valgrind
 * (tests/test_sanitizers.py).  Prints "ok <inputs>". */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *q = realloc(buf, cap * 2);
            if (!q) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "out of memory reading %s\n", path);
        exit(2);
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static long run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "cannot stat %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path);
    DIR *d = opendir(path);
    long n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!p)
            exit(2);
        snprintf(p, len, "%s/%s", path, e->d_name);
        n += run_path(p);
        free(p);
    }
    if (d)
        closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    long n = 0;
    for (int i = 1; i < argc; i++)
        n += run_path(argv[i]);
    printf("ok %ld\n", n);
    return 0;
}
