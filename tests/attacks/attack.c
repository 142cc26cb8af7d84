/* Attacks a hostile command would try, one per name, run as `shell` through
 * warden's API by tests/attacks.rs. Each prints one line saying what the
 * kernel answered and exits 0 when the attempt was stopped, 1 when it got
 * through, 2 on a usage error. A few modes serve the test instead of
 * attacking (serve-abstract, for the runtime's side). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <termios.h>
#include <unistd.h>

static int blocked(const char *what, long rc) {
    if (rc < 0) {
        printf("blocked: %s: %s\n", what, strerror(errno));
        return 0;
    }
    printf("GOT THROUGH: %s returned %ld\n", what, rc);
    return 1;
}

/* The attempt must fail with exactly this errno (others may mean the
 * attempt was malformed rather than stopped). */
static int blocked_with(const char *what, long rc, int want) {
    if (rc < 0 && errno == want) {
        printf("blocked: %s: %s\n", what, strerror(errno));
        return 0;
    }
    if (rc < 0)
        printf("WRONG ERROR: %s: %s (wanted %s)\n", what, strerror(errno), strerror(want));
    else
        printf("GOT THROUGH: %s returned %ld\n", what, rc);
    return 1;
}

/* Runs f in a child; stopped when the child dies of SIGSYS (seccomp kill). */
static int killed_by_seccomp(const char *what, void (*f)(void)) {
    pid_t pid = fork();
    if (pid == 0) {
        f();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
        printf("blocked: %s: killed by SIGSYS\n", what);
        return 0;
    }
    printf("GOT THROUGH: %s (status %d)\n", what, status);
    return 1;
}

static void x32_getpid(void) { syscall(0x40000000 | SYS_getpid); }

static void ia32_getpid(void) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory");
    (void)ret;
}

/* The connect gate's check against its use. A second thread keeps
 * rewriting the address (and, for "fd", swapping the descriptor between a
 * unix and a TCP socket) while the first connects: between the proxy, or
 * a unix path, and a target. Warden must act on what it read, and a call
 * it lets through must not become a TCP connection: nothing may ever
 * reach the target. */
static volatile int racing = 1;
static struct sockaddr_storage race_addr, race_from, race_to;
static int race_fd = -1, race_unix = -1, race_tcp = -1, race_fds = 0;

static void *flip(void *unused) {
    (void)unused;
    while (racing) {
        memcpy(&race_addr, &race_from, sizeof race_addr);
        if (race_fds) dup2(race_unix, race_fd);
        memcpy(&race_addr, &race_to, sizeof race_addr);
        if (race_fds) dup2(race_tcp, race_fd);
    }
    return NULL;
}

static void set_inet(struct sockaddr_storage *ss, const char *ip, int port) {
    struct sockaddr_in *sa = (struct sockaddr_in *)ss;
    memset(ss, 0, sizeof *ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    inet_pton(AF_INET, ip, &sa->sin_addr);
}

static int connect_race(const char *how, const char *ip, int port, int proxy_port) {
    if (!strcmp(how, "proxy")) {
        set_inet(&race_from, "127.0.0.1", proxy_port);
    } else {
        struct sockaddr_un *un = (struct sockaddr_un *)&race_from;
        memset(&race_from, 0, sizeof race_from);
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, "/tmp/race.sock");
    }
    set_inet(&race_to, ip, port);
    memcpy(&race_addr, &race_from, sizeof race_addr);
    race_fds = !strcmp(how, "fd");
    if (race_fds) {
        race_unix = socket(AF_UNIX, SOCK_STREAM, 0);
        race_tcp = socket(AF_INET, SOCK_STREAM, 0);
        race_fd = dup(race_tcp);
    }
    pthread_t t;
    pthread_create(&t, NULL, flip, NULL);
    int reached = 0, proxied = 0, refused = 0, other = 0;
    for (int i = 0; i < 2000; i++) {
        int s = race_fds ? race_fd : socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&race_addr, sizeof(struct sockaddr_in6)) == 0) {
            struct sockaddr_in peer = {0};
            socklen_t len = sizeof peer;
            getpeername(s, (struct sockaddr *)&peer, &len);
            if (peer.sin_family == AF_INET && ntohs(peer.sin_port) == port) reached++;
            else proxied++;
            if (race_fds) { race_tcp = socket(AF_INET, SOCK_STREAM, 0); }
        } else if (errno == EACCES) {
            refused++;
        } else {
            other++;
        }
        if (!race_fds) close(s);
    }
    racing = 0;
    pthread_join(t, NULL);
    printf("%s: connect race (%s) 2000 tries: %d to the proxy, %d refused, %d other errors, %d reached %s:%d\n",
           reached ? "GOT THROUGH" : "blocked", how, proxied, refused, other, reached, ip, port);
    return reached ? 1 : 0;
}

static int connect_unix(const char *path, int abstract) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n > sizeof(a.sun_path) - 2) n = sizeof(a.sun_path) - 2;
    memcpy(a.sun_path + (abstract ? 1 : 0), path, n);
    socklen_t len = offsetof(struct sockaddr_un, sun_path) + n + (abstract ? 1 : 0);
    return connect(s, (struct sockaddr *)&a, len);
}

static int serve_abstract(const char *name) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n);
    if (bind(s, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + n + 1) < 0 || listen(s, 8) < 0) {
        perror("serve-abstract");
        return 2;
    }
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c >= 0) {
            write(c, "runtime-secret\n", 15);
            close(c);
        }
    }
}

/* listen(2) without bind(2): the kernel binds the socket to a port on
 * every address first. Answers the port it got, if any. */
static int tcp_listen(int family) {
    int s = socket(family, SOCK_STREAM, 0);
    if (s < 0) return -1;
    if (listen(s, 8) < 0) return -1;
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &len);
    return ntohs(((struct sockaddr_in *)&a)->sin_port);
}

/* A unix socket at PATH that listens, and a client of it that is served. */
static int unix_listen(const char *path) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0), c = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    unlink(path);
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); return 1; }
    if (listen(s, 8) < 0) { perror("listen"); return 1; }
    if (connect(c, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); return 1; }
    int served = accept(s, NULL, NULL);
    struct ucred peer;
    socklen_t len = sizeof peer;
    if (served < 0 || write(served, "hi", 2) != 2) { perror("accept"); return 1; }
    char got[2];
    if (read(c, got, 2) != 2) { perror("read"); return 1; }
    getsockopt(c, SOL_SOCKET, SO_PEERCRED, &peer, &len);
    printf("unix listen works: the server's uid %u gid %u, mine %u %u\n", peer.uid, peer.gid, getuid(), getgid());
    unlink(path);
    return peer.uid == getuid() && peer.gid == getgid() ? 0 : 1;
}

/* listen on a bound unix socket's number while another thread puts a TCP
 * socket under that number: the TCP socket must never listen. */
static int listen_swap;
static volatile long swaps;
static void *swap_in_tcp(void *unused) {
    (void)unused;
    while (racing) {
        dup2(race_unix, listen_swap);
        dup2(race_tcp, listen_swap);
        swaps++;
    }
    return NULL;
}

static int listen_race(const char *path, int tries) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    unlink(path);
    race_unix = socket(AF_UNIX, SOCK_STREAM, 0);
    if (bind(race_unix, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); return 1; }
    race_tcp = socket(AF_INET, SOCK_STREAM, 0);
    listen_swap = dup(race_unix);
    pthread_t t;
    pthread_create(&t, NULL, swap_in_tcp, NULL);
    while (swaps < 100) usleep(100);
    int listened = 0, refused = 0, tcp = 0;
    for (int i = 0; i < tries && !tcp; i++) {
        if (listen(listen_swap, 8) == 0) listened++; else refused++;
        int on = 0;
        socklen_t len = sizeof on;
        getsockopt(race_tcp, SOL_SOCKET, SO_ACCEPTCONN, &on, &len);
        tcp = on;
    }
    racing = 0;
    pthread_join(t, NULL);
    unlink(path);
    printf("%s: listen race %d tries: %d listened, %d refused, TCP socket listening: %d\n",
           tcp ? "GOT THROUGH" : "blocked", tries, listened, refused, tcp);
    return tcp;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *a = argv[1];
    const char *arg = argc > 2 ? argv[2] : "";
    pid_t target = argc > 2 ? atoi(argv[2]) : 1;

    if (!strcmp(a, "serve-abstract")) return serve_abstract(arg);
    if (!strcmp(a, "ptrace-attach")) return blocked("ptrace(PTRACE_ATTACH)", ptrace(PTRACE_ATTACH, target, 0, 0));
    if (!strcmp(a, "ptrace-traceme")) return blocked_with("ptrace(PTRACE_TRACEME)", ptrace(PTRACE_TRACEME, 0, 0, 0), EPERM);
    if (!strcmp(a, "process-vm-readv") || !strcmp(a, "process-vm-writev")) {
        char buf[64] = {0};
        struct iovec local = {buf, sizeof buf}, remote = {(void *)0x400000, sizeof buf};
        long rc = a[11] == 'r' ? process_vm_readv(target, &local, 1, &remote, 1, 0)
                               : process_vm_writev(target, &local, 1, &remote, 1, 0);
        return blocked(a, rc);
    }
    if (!strcmp(a, "proc-mem")) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/mem", target);
        return blocked("open /proc/PID/mem", open(path, O_RDWR));
    }
    if (!strcmp(a, "io-uring")) {
        char params[120] = {0};
        return blocked_with("io_uring_setup", syscall(SYS_io_uring_setup, 8, params), EPERM);
    }
    if (!strcmp(a, "bpf")) {
        union bpf_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.map_type = BPF_MAP_TYPE_ARRAY;
        attr.key_size = 4;
        attr.value_size = 4;
        attr.max_entries = 1;
        return blocked_with("bpf(BPF_MAP_CREATE)", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr), EPERM);
    }
    if (!strcmp(a, "perf-event-open")) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_CPU_CLOCK;
        attr.exclude_kernel = 1;
        return blocked_with("perf_event_open", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0), EPERM);
    }
    if (!strcmp(a, "userfaultfd")) return blocked_with("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | 1), EPERM);
    if (!strcmp(a, "keyctl"))
        return blocked_with("keyctl(GET_KEYRING_ID)", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0), EPERM);
    if (!strcmp(a, "add-key"))
        return blocked_with("add_key", syscall(SYS_add_key, "user", "x", "v", 1, KEY_SPEC_PROCESS_KEYRING), EPERM);
    if (!strcmp(a, "mount")) return blocked_with("mount tmpfs", mount("none", "/tmp", "tmpfs", 0, NULL), EPERM);
    if (!strcmp(a, "umount")) return blocked_with("umount2 /proc", umount2("/proc", MNT_DETACH), EPERM);
    if (!strcmp(a, "unshare-user")) return blocked_with("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER), EPERM);
    if (!strcmp(a, "unshare-net")) return blocked_with("unshare(CLONE_NEWNET)", unshare(CLONE_NEWNET), EPERM);
    if (!strcmp(a, "clone-newuser"))
        return blocked_with("clone(CLONE_NEWUSER)", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0), EPERM);
    if (!strcmp(a, "clone3")) {
        unsigned long long args[11] = {0};
        args[0] = CLONE_NEWUSER;
        args[4] = SIGCHLD;
        return blocked_with("clone3(CLONE_NEWUSER)", syscall(SYS_clone3, args, sizeof args), ENOSYS);
    }
    if (!strcmp(a, "setns")) {
        int fd = open("/proc/self/ns/uts", O_RDONLY);
        return blocked_with("setns", syscall(SYS_setns, fd, 0), EPERM);
    }
    if (!strcmp(a, "init-module")) return blocked_with("init_module", syscall(SYS_init_module, "", 0, ""), EPERM);
    if (!strcmp(a, "finit-module")) {
        int fd = open("/dev/null", O_RDONLY);
        return blocked_with("finit_module", syscall(SYS_finit_module, fd, "", 0), EPERM);
    }
    if (!strcmp(a, "reboot"))
        return blocked_with("reboot(POWER_OFF)", syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2, LINUX_REBOOT_CMD_POWER_OFF, 0), EPERM);
    if (!strcmp(a, "kexec")) return blocked_with("kexec_load", syscall(SYS_kexec_load, 0, 0, 0, 0), EPERM);
    if (!strcmp(a, "swapon")) return blocked_with("swapon", syscall(SYS_swapon, "/tmp/swap", 0), EPERM);
    if (!strcmp(a, "syslog")) return blocked_with("syslog(READ_ALL)", syscall(SYS_syslog, 3, (char[16]){0}, 16), EPERM);
    if (!strcmp(a, "open-by-handle")) {
        char handle[136] = {0};
        ((unsigned int *)handle)[0] = 8;
        return blocked_with("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, handle, O_RDONLY), EPERM);
    }
    if (!strcmp(a, "chroot")) return blocked_with("chroot", chroot("/tmp"), EPERM);
    if (!strcmp(a, "modify-ldt")) {
        char ldt[16] = {0};
        return blocked_with("modify_ldt(read)", syscall(SYS_modify_ldt, 0, ldt, sizeof ldt), EPERM);
    }
    if (!strcmp(a, "mbind")) return blocked_with("mbind", syscall(SYS_mbind, 0, 0, 0, 0, 0, 0), EPERM);
    if (!strcmp(a, "set-mempolicy")) return blocked_with("set_mempolicy", syscall(SYS_set_mempolicy, 0, 0, 0), EPERM);
#ifndef SYS_memfd_secret
#define SYS_memfd_secret 447
#endif
    if (!strcmp(a, "memfd-secret")) return blocked_with("memfd_secret", syscall(SYS_memfd_secret, 0), EPERM);
    if (!strcmp(a, "personality")) return blocked_with("personality(ADDR_NO_RANDOMIZE)", personality(ADDR_NO_RANDOMIZE), EPERM);
    if (!strcmp(a, "tiocsti")) {
        char c = 'x';
        return blocked_with("ioctl(TIOCSTI)", ioctl(0, TIOCSTI, &c), EPERM);
    }
    if (!strcmp(a, "af-packet")) return blocked_with("socket(AF_PACKET)", socket(AF_PACKET, SOCK_RAW, 0), EPERM);
    if (!strcmp(a, "raw-socket")) return blocked_with("socket(AF_INET, SOCK_RAW)", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP), EPERM);
    if (!strcmp(a, "netlink-audit")) return blocked_with("socket(AF_NETLINK, NETLINK_AUDIT)", socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT), EPERM);
    if (!strcmp(a, "udp-socket")) return blocked_with("socket(AF_INET, SOCK_DGRAM)", socket(AF_INET, SOCK_DGRAM, 0), EPERM);
    if (!strcmp(a, "udp6-socket")) return blocked_with("socket(AF_INET6, SOCK_DGRAM)", socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP), EPERM);
    if (!strcmp(a, "ping-socket")) return blocked_with("socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP)", socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP), EPERM);
    if (!strcmp(a, "sctp-socket")) return blocked_with("socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)", socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP), EPERM);
    if (!strcmp(a, "alg-socket")) return blocked_with("socket(AF_ALG)", socket(AF_ALG, SOCK_SEQPACKET, 0), EPERM);
    if (!strcmp(a, "x32")) return killed_by_seccomp("x32 getpid", x32_getpid);
    if (!strcmp(a, "ia32")) return killed_by_seccomp("ia32 int 0x80 getpid", ia32_getpid);
    if (!strcmp(a, "kill")) return blocked("kill(SIGKILL)", kill(target, SIGKILL));
    if (!strcmp(a, "unix-connect")) return blocked("connect to a unix socket", connect_unix(arg, 0));
    if (!strcmp(a, "abstract-connect")) return blocked_with("connect to an abstract socket", connect_unix(arg, 1), EPERM);
    if (!strcmp(a, "tcp-connect")) {
        /* tcp-connect PORT [IP]: to loopback unless an address is given. */
        const char *ip = argc > 3 ? argv[3] : "127.0.0.1";
        char what[64];
        snprintf(what, sizeof what, "tcp connect to %s:%d", ip, atoi(arg));
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(arg))};
        if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) return 2;
        return blocked_with(what, connect(s, (struct sockaddr *)&sa, sizeof sa), EACCES);
    }
    if (!strcmp(a, "connect-race")) {
        /* connect-race proxy|unix|fd IP PORT PROXY_PORT */
        if (argc < 6) return 2;
        return connect_race(arg, argv[3], atoi(argv[4]), atoi(argv[5]));
    }
    if (!strcmp(a, "tcp-fast-open")) {
        /* A connection made by the first send, around connect(). */
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(arg))};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        int sent = sendto(s, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&sa, sizeof sa);
        return blocked_with("sendto(MSG_FASTOPEN) to loopback", sent < 0 ? -1 : 0, EPERM);
    }
    if (!strcmp(a, "tcp-listen")) return blocked_with("tcp listen without bind", tcp_listen(AF_INET), EACCES);
    if (!strcmp(a, "tcp6-listen")) return blocked_with("tcp6 listen without bind", tcp_listen(AF_INET6), EACCES);
    if (!strcmp(a, "unix-listen")) return unix_listen(arg);
    if (!strcmp(a, "listen-race")) return listen_race(arg, argc > 3 ? atoi(argv[3]) : 2000);
    if (!strcmp(a, "tiocsetd")) {
        int n_tty = 0;
        return blocked_with("ioctl(TIOCSETD)", ioctl(0, TIOCSETD, &n_tty), EPERM);
    }
    if (!strcmp(a, "tcp-bind")) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(arg))};
        return blocked_with("tcp bind", bind(s, (struct sockaddr *)&sa, sizeof sa), EACCES);
    }
    if (!strcmp(a, "memory-bomb")) {
        /* Touch memory until something stops us. */
        size_t total = 0;
        for (;;) {
            char *p = malloc(64 << 20);
            if (!p) break;
            memset(p, 1, 64 << 20);
            total += 64 << 20;
            if (total > (size_t)64 << 30) break;
        }
        printf("%s: stopped after %zu MiB\n", total > (size_t)8 << 30 ? "GOT THROUGH" : "blocked", total >> 20);
        return total > (size_t)8 << 30;
    }
    if (!strcmp(a, "capabilities")) {
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        int bad = 0;
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "Cap", 3) && !strstr(line, "0000000000000000")) {
                printf("GOT THROUGH: %s", line);
                bad = 1;
            }
        if (!bad) printf("blocked: every capability set is empty\n");
        return bad;
    }
    fprintf(stderr, "unknown attack %s\n", a);
    return 2;
}
