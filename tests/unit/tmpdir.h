/* tmpdir.h -- temporary data directories for the unit tests that run a
 * store (test_core, test_wal, test_push): removed with what they hold,
 * subdirectories included (the tiered store keeps far/ there). */
#ifndef DQ_TEST_TMPDIR_H
#define DQ_TEST_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static inline void rm_rf(const char *d) {
    DIR *dd = opendir(d);
    if (!dd) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(dd))) {
        if (de->d_name[0] == '.') continue;
        if (snprintf(p, sizeof p, "%s/%s", d, de->d_name) >= (int)sizeof p)
            continue;
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(p);
        else unlink(p);
    }
    closedir(dd);
    rmdir(d);
}

#endif
