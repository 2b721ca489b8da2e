/* work.c -- `delayq work --topic T [-c N] [--timeout D] [--grace D] -- cmd args`
 * (DESIGN §10): any program as a consumer, on libdelayq's worker.
 *
 * One process per job, spawned in its own process group with the body on
 * stdin and DELAYQ_TOPIC, DELAYQ_ID, DELAYQ_ATTEMPT and DELAYQ_DEADLINE in
 * its environment. Exit 0 -> ACK; any other status -> NACK with the job's
 * backoff (dead once its retries are spent). Past --timeout, or when a stop's
 * grace ends, the group gets SIGTERM, then SIGKILL after --kill-after, and
 * the job goes back. Every line the command writes is copied to our stdout
 * or stderr prefixed with "[topic/id] ".
 *
 * Threads: the worker's (one handler thread per slot, each waiting on its
 * child with poll(2) over the child's pipes, a pidfd and the slot's cancel
 * pipe); SIGTERM/SIGINT are blocked everywhere and taken by sigwait in the
 * main thread, which asks the worker to stop.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "delayq.h"

#include "cli/work.h"
#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/duration.h"
#include "lib/xalloc.h"

extern char **environ;

#define EXIT_USAGE 2
#define DEFAULT_GRACE_MS 30000
#define DEFAULT_KILL_AFTER_MS 5000
#define MAX_TOPICS 64

struct slot {
    int cancel[2]; /* on_cancel writes a byte; the handler polls the read end */
};

struct work {
    char **cmd; /* argv of the command, NULL-terminated */
    int64_t kill_after_ms;
    struct slot *slots;
    pthread_mutex_t out_mu; /* one line at a time on stdout/stderr */
};

void work_usage(FILE *f) {
    fputs("usage: delayq work --topic T [--topic U ...] [-c N] [--timeout D] [--grace D]\n"
          "                   [--kill-after D] -- COMMAND [ARGS...]\n\n"
          "Run COMMAND once per job of the topics, up to N at a time.\n\n"
          "The job's body is on COMMAND's stdin; DELAYQ_TOPIC, DELAYQ_ID, DELAYQ_ATTEMPT\n"
          "and DELAYQ_DEADLINE (unix ms) are in its environment. Exit 0 acks the job;\n"
          "any other status (75, EX_TEMPFAIL, by convention) retries it with its\n"
          "backoff, until its retries are spent and it goes dead. The job's lease is\n"
          "renewed while COMMAND runs. Output lines are prefixed with [topic/id].\n\n"
          "Options:\n"
          "  --topic T, -t T  consume topic T (repeat for more)\n"
          "  -c N             run up to N commands at once (default 1)\n"
          "  --timeout D      past D, stop COMMAND and retry the job (default: none)\n"
          "  --grace D        on SIGTERM/SIGINT, let running commands finish for up to D,\n"
          "                   then stop them and hand their jobs back (default 30s)\n"
          "  --kill-after D   SIGKILL a command this long after SIGTERM (default 5s)\n\n"
          "Global options: -h HOST, -p PORT, -a PASSWORD (see 'delayq help').\n", f);
}

static void usage_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_fail(const char *fmt, ...) {
    va_list ap;
    fputs("delayq work: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'delayq work --help'.\n", stderr);
    exit(EXIT_USAGE);
}

/* ---- output ----------------------------------------------------------- */

/* Copies complete lines of `b` to f with the job's prefix, keeping a partial
 * last line unless `flush`. */
static void emit_lines(struct work *wk, FILE *f, const struct delayq_job *j, struct buf *b,
                       bool flush) {
    size_t start = 0;
    if (b->len == 0) return;
    pthread_mutex_lock(&wk->out_mu);
    for (;;) {
        char *nl = memchr(b->p + start, '\n', b->len - start);
        size_t end = nl ? (size_t)(nl - b->p) : b->len;
        if (!nl && (!flush || end == start)) break;
        fprintf(f, "[%s/%s] %.*s\n", j->topic, j->id, (int)(end - start), b->p + start);
        start = nl ? end + 1 : end;
    }
    fflush(f);
    pthread_mutex_unlock(&wk->out_mu);
    memmove(b->p, b->p + start, b->len - start);
    b->len -= start;
}

static void say(struct work *wk, const struct delayq_job *j, const char *what) {
    pthread_mutex_lock(&wk->out_mu);
    fprintf(stderr, "delayq work: [%s/%s] %s\n", j->topic, j->id, what);
    fflush(stderr);
    pthread_mutex_unlock(&wk->out_mu);
}

/* ---- one job ------------------------------------------------------------ */

/* environ plus the job's variables (replacing any inherited ones). */
static char **job_env(const struct delayq_job *j, char *own[4]) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = xcalloc(n + 5, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "DELAYQ_TOPIC=", 13) && strncmp(environ[i], "DELAYQ_ID=", 10) &&
            strncmp(environ[i], "DELAYQ_ATTEMPT=", 15) &&
            strncmp(environ[i], "DELAYQ_DEADLINE=", 16))
            env[k++] = environ[i];
    struct buf b[4] = {BUF_INIT, BUF_INIT, BUF_INIT, BUF_INIT};
    buf_appendf(&b[0], "DELAYQ_TOPIC=%s", j->topic);
    buf_appendf(&b[1], "DELAYQ_ID=%s", j->id);
    buf_appendf(&b[2], "DELAYQ_ATTEMPT=%lld", (long long)j->attempts);
    buf_appendf(&b[3], "DELAYQ_DEADLINE=%lld", (long long)j->deadline);
    for (int i = 0; i < 4; i++) {
        buf_append(&b[i], "", 1);
        env[k++] = own[i] = b[i].p;
    }
    return env;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* Reads what fd has into b; at EOF or a hard error closes it. */
static void pump_out(int *fd, struct buf *b) {
    for (;;) {
        char *p = buf_reserve(b, 4096);
        ssize_t n = read(*fd, p, 4096);
        if (n > 0) {
            b->len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        close_fd(fd);
        return;
    }
}

static enum delayq_result handle(struct delayq_task *task, void *arg) {
    struct work *wk = arg;
    const struct delayq_job *j = delayq_task_job(task);
    struct slot *sl = &wk->slots[delayq_task_slot(task)];
    char drain[64];
    while (read(sl->cancel[0], drain, sizeof drain) > 0) continue;
    if (delayq_task_cancelled(task)) return DELAYQ_RETRY;

    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
        say(wk, j, "cannot make pipes; retrying the job");
        return DELAYQ_RETRY;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawnattr_t sa;
    posix_spawnattr_init(&sa);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGHUP);
    posix_spawnattr_setsigmask(&sa, &none);
    posix_spawnattr_setsigdefault(&sa, &dfl);
    posix_spawnattr_setpgroup(&sa, 0);
    posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    char *own[4];
    char **env = job_env(j, own);
    pid_t pid;
    int rc = posix_spawnp(&pid, wk->cmd[0], &fa, &sa, wk->cmd, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&sa);
    for (int i = 0; i < 4; i++) free(own[i]);
    free(env);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        close(err[0]);
        char msg[512];
        snprintf(msg, sizeof msg, "cannot run %s: %s; retrying the job", wk->cmd[0],
                 strerror(rc));
        say(wk, j, msg);
        return DELAYQ_RETRY;
    }
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

    struct buf ob = BUF_INIT, eb = BUF_INIT;
    size_t written = 0;
    int status = 0;
    bool exited = false, stopping = false, killed = false;
    int64_t kill_at = 0;
    int fin = in[1], fout = out[0], ferr = err[0];
    if (j->body_len == 0) close_fd(&fin);
    while (!exited || fout >= 0 || ferr >= 0) {
        struct pollfd p[5] = {
            {fin, POLLOUT, 0},       {fout, POLLIN, 0}, {ferr, POLLIN, 0},
            {sl->cancel[0], POLLIN, 0}, {exited ? -1 : pidfd, POLLIN, 0},
        };
        int timeout = -1;
        if (stopping && !killed) {
            int64_t left = kill_at - clock_mono_ms();
            timeout = left > 0 ? (int)left : 0;
        }
        if (pidfd < 0 && fout < 0 && ferr < 0 && !exited) timeout = timeout < 0 ? 10 : timeout;
        if (exited) timeout = 0; /* only drain what is already written */
        int n = poll(p, 5, timeout);
        if (n < 0 && errno != EINTR) break;
        if (p[0].revents) {
            ssize_t w = write(fin, j->body + written, j->body_len - written);
            if (w > 0) written += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == j->body_len)
                close_fd(&fin);
        }
        if (p[1].revents) pump_out(&fout, &ob);
        if (p[2].revents) pump_out(&ferr, &eb);
        emit_lines(wk, stdout, j, &ob, false);
        emit_lines(wk, stderr, j, &eb, false);
        if (p[3].revents) {
            while (read(sl->cancel[0], drain, sizeof drain) > 0) continue;
            if (!stopping) {
                stopping = true;
                kill_at = clock_mono_ms() + wk->kill_after_ms;
                kill(-pid, SIGTERM);
                say(wk, j, "cancelled (timeout or stop): SIGTERM");
            }
        }
        if (stopping && !killed && clock_mono_ms() >= kill_at) {
            killed = true;
            kill(-pid, SIGKILL);
            say(wk, j, "still running: SIGKILL");
        }
        if (!exited && (p[4].revents || pidfd < 0)) {
            pid_t r = waitpid(pid, &status, pidfd < 0 ? WNOHANG : 0);
            exited = r == pid;
        }
        if (exited && n == 0) break; /* drained: a background child may keep the pipes */
    }
    if (!exited) waitpid(pid, &status, 0);
    if (stopping) kill(-pid, SIGKILL); /* whatever of the group is left */
    emit_lines(wk, stdout, j, &ob, true);
    emit_lines(wk, stderr, j, &eb, true);
    buf_free(&ob);
    buf_free(&eb);
    close_fd(&fin);
    close_fd(&fout);
    close_fd(&ferr);
    if (pidfd >= 0) close(pidfd);

    char msg[64];
    if (WIFEXITED(status))
        snprintf(msg, sizeof msg, "exit %d", WEXITSTATUS(status));
    else
        snprintf(msg, sizeof msg, "killed by signal %d", WTERMSIG(status));
    say(wk, j, msg);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && !delayq_task_cancelled(task)
               ? DELAYQ_DONE
               : DELAYQ_RETRY;
}

static void on_cancel(struct delayq_task *t, void *arg) {
    struct work *wk = arg;
    ssize_t n = write(wk->slots[delayq_task_slot(t)].cancel[1], "x", 1);
    (void)n; /* a full pipe already says "cancel" */
}

static void on_success(const struct delayq_job *j, void *arg) { say(arg, j, "acked"); }

static void on_retry(const struct delayq_job *j, int err, void *arg) {
    char msg[96] = "retry (nacked)";
    if (err)
        snprintf(msg, sizeof msg, "answer failed (%s): the lease will end",
                 delayq_error_name(err));
    say(arg, j, msg);
}

static void on_dead(const struct delayq_job *j, int err, void *arg) {
    say(arg, j, "dead (no retries left)");
}

static void worker_log(const char *msg, void *arg) {
    struct work *wk = arg;
    pthread_mutex_lock(&wk->out_mu);
    fprintf(stderr, "delayq work: %s\n", msg);
    fflush(stderr);
    pthread_mutex_unlock(&wk->out_mu);
}

/* ---- main ----------------------------------------------------------------- */

static void *run_thread(void *w) {
    delayq_worker_run(w);
    return NULL;
}

static int64_t opt_duration(const char *name, const char *val) {
    int64_t v;
    const char *why;
    if (duration_parse(val, &v, &why) < 0) usage_fail("invalid --%s '%s': %s", name, val, why);
    return v;
}

int work_main(const struct cli_target *t, int argc, char **argv) {
    const char *topics[MAX_TOPICS];
    size_t ntopics = 0;
    int64_t conc = 1, timeout = 0, grace = DEFAULT_GRACE_MS,
            kill_after = DEFAULT_KILL_AFTER_MS;
    int i = 0;
    for (; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--") == 0) {
            i++;
            break;
        }
        if (s[0] != '-') break; /* the command */
        if (strcmp(s, "--help") == 0) {
            work_usage(stdout);
            return 0;
        }
        const char *name = s[1] == '-' ? s + 2 : s + 1, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        char opt[32];
        snprintf(opt, sizeof opt, "%.*s", (int)(nl < 31 ? nl : 31), name);
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            if (i + 1 >= argc) usage_fail("%s needs a value", s);
            val = argv[++i];
        }
        if (!strcmp(opt, "topic") || !strcmp(opt, "t")) {
            if (ntopics == MAX_TOPICS) usage_fail("too many topics (at most %d)", MAX_TOPICS);
            if (!*val) usage_fail("empty --topic");
            topics[ntopics++] = val;
        } else if (!strcmp(opt, "c") || !strcmp(opt, "concurrency")) {
            char *end;
            conc = strtoll(val, &end, 10);
            if (*end || !*val || conc < 1 || conc > 1000)
                usage_fail("invalid -c '%s': expected 1 to 1000", val);
        } else if (!strcmp(opt, "timeout")) {
            timeout = opt_duration("timeout", val);
        } else if (!strcmp(opt, "grace")) {
            grace = opt_duration("grace", val);
        } else if (!strcmp(opt, "kill-after")) {
            kill_after = opt_duration("kill-after", val);
        } else {
            usage_fail("unknown option '%s'", s);
        }
    }
    if (ntopics == 0) usage_fail("missing --topic");
    if (i >= argc) usage_fail("missing the command to run (after --)");

    struct work wk = {.cmd = argv + i, .kill_after_ms = kill_after};
    pthread_mutex_init(&wk.out_mu, NULL);
    wk.slots = xcalloc((size_t)conc, sizeof *wk.slots);
    for (int k = 0; k < conc; k++) {
        if (pipe2(wk.slots[k].cancel, O_CLOEXEC | O_NONBLOCK) < 0) {
            fprintf(stderr, "delayq work: cannot make a pipe: %s\n", strerror(errno));
            return 1;
        }
    }
    /* The signals we stop on go to sigwait below, in no other thread. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct delayq_options conn = {.host = t->host, .port = t->port, .password = t->password};
    struct delayq_worker_opts o = {
        .topics = topics,
        .ntopics = ntopics,
        .concurrency = (int)conc,
        .timeout_ms = timeout,
        .grace_ms = grace ? grace : -1,
        .handler = handle,
        .on_success = on_success,
        .on_retry = on_retry,
        .on_dead = on_dead,
        .on_cancel = on_cancel,
        .arg = &wk,
    };
    const char *why;
    delayq_worker *w = delayq_worker_new(&conn, &o, &why);
    if (!w) usage_fail("%s", why);
    delayq_worker_set_log(w, worker_log);
    fprintf(stderr, "delayq work: consuming %zu topic%s with up to %lld at a time\n", ntopics,
            ntopics == 1 ? "" : "s", (long long)conc);
    pthread_t th;
    pthread_create(&th, NULL, run_thread, w);
    int sig;
    sigwait(&stop, &sig);
    char d[DURATION_FMT_MAX];
    pthread_mutex_lock(&wk.out_mu);
    fprintf(stderr, "delayq work: %s: stopping, grace %s\n", strsignal(sig),
            duration_format(grace, d, sizeof d));
    pthread_mutex_unlock(&wk.out_mu);
    delayq_worker_stop(w);
    pthread_join(th, NULL);
    delayq_worker_free(w);
    for (int k = 0; k < conc; k++) close(wk.slots[k].cancel[0]), close(wk.slots[k].cancel[1]);
    free(wk.slots);
    fprintf(stderr, "delayq work: stopped\n");
    return 0;
}
