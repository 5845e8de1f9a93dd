/*
 * rtsp-probe: an RTSP load client that shares no code with isochron, to check what
 * `isochron bench` reports the way a plain player sees it.
 *
 * It opens N sessions of one URL over RTP/UDP (DESCRIBE, SETUP of every m= section, PLAY; no
 * rate requests, standard pacing), receives every session on one thread with epoll and
 * recvmmsg(2), and for each RTP stream measures how late packets arrive behind the stream's
 * own schedule: arrival − RTP timestamp / clock rate, less the least such difference seen (the
 * best-served packet sets the schedule). A player with a playout buffer shallower than a
 * session's worst lateness would have stalled. After SECONDS it tears the sessions down and
 * prints one line per session and a summary; the exit status is 0 when every session got
 * packets and none was later than LIMIT_MS (default 2000).
 *
 * Build: cc -O2 -o rtsp-probe tools/rtsp-probe.c
 * Usage: rtsp-probe rtsp://HOST:PORT/PATH N SECONDS [LIMIT_MS]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRACKS 4
#define BATCH 64

struct track {
    int fd;
    uint32_t clock;
    int have;
    uint32_t last_ts; /* the last RTP timestamp, for unwrapping */
    int64_t ext;      /* timestamp units since the first packet, unwrapped */
    int64_t best;     /* least (arrival − media time), ns */
    int64_t worst;    /* most lateness, ns */
    uint16_t next_seq;
    uint64_t packets, lost, bytes;
};

struct session {
    int ctl;
    int cseq;
    char id[128];
    int ntracks;
    struct track t[MAX_TRACKS];
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

/* Sends a request and reads the whole response (headers and body) into buf. Returns the
 * status code. */
static int request(struct session *s, const char *method, const char *url, const char *extra,
                   char *buf, size_t cap) {
    char req[4096];
    int n = snprintf(req, sizeof req, "%s %s RTSP/1.0\r\nCSeq: %d\r\nUser-Agent: rtsp-probe\r\n",
                     method, url, ++s->cseq);
    if (s->id[0]) n += snprintf(req + n, sizeof req - (size_t)n, "Session: %s\r\n", s->id);
    n += snprintf(req + n, sizeof req - (size_t)n, "%s\r\n", extra ? extra : "");
    if (write(s->ctl, req, (size_t)n) != n) die("write");
    size_t got = 0;
    for (;;) {
        ssize_t r = read(s->ctl, buf + got, cap - 1 - got);
        if (r <= 0) die("read RTSP response");
        got += (size_t)r;
        buf[got] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) continue;
        char *cl = strcasestr(buf, "\nContent-Length:");
        size_t body = cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
        if (got >= (size_t)(end + 4 - buf) + body) break;
    }
    int status = 0;
    sscanf(buf, "RTSP/1.0 %d", &status);
    return status;
}

static int udp_pair(int *rtp, int *rtcp, int *port) {
    for (int tries = 0; tries < 100; tries++) {
        int a = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET};
        if (bind(a, (struct sockaddr *)&sa, sizeof sa)) die("bind");
        socklen_t l = sizeof sa;
        getsockname(a, (struct sockaddr *)&sa, &l);
        int p = ntohs(sa.sin_port);
        if (p & 1) { close(a); continue; }
        int b = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        sa.sin_port = htons((uint16_t)(p + 1));
        if (bind(b, (struct sockaddr *)&sa, sizeof sa)) { close(a); close(b); continue; }
        int size = 4 << 20;
        setsockopt(a, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
        *rtp = a, *rtcp = b, *port = p;
        return 0;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s rtsp://HOST:PORT/PATH N SECONDS [LIMIT_MS]\n", argv[0]);
        return 2;
    }
    const char *url = argv[1];
    int n = atoi(argv[2]);
    double seconds = atof(argv[3]);
    double limit_ms = argc > 4 ? atof(argv[4]) : 2000;
    char host[256] = {0};
    int port = 554;
    if (sscanf(url, "rtsp://%255[^:/]:%d", host, &port) < 1) {
        fprintf(stderr, "not an rtsp:// URL: %s\n", url);
        return 2;
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    if (getaddrinfo(host, ports, &hints, &ai)) die("getaddrinfo");
    struct session *ss = calloc((size_t)n, sizeof *ss);
    int ep = epoll_create1(0);
    static char buf[65536];
    for (int i = 0; i < n; i++) {
        struct session *s = &ss[i];
        s->ctl = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s->ctl, ai->ai_addr, ai->ai_addrlen)) die("connect");
        if (request(s, "DESCRIBE", url, "Accept: application/sdp\r\n", buf, sizeof buf) != 200) {
            fprintf(stderr, "session %d: DESCRIBE refused:\n%s\n", i, buf);
            return 1;
        }
        char base[1024];
        snprintf(base, sizeof base, "%s", url);
        char *cb = strcasestr(buf, "\nContent-Base:");
        if (cb) sscanf(cb + 14, " %1023[^\r\n]", base);
        char *sdp = strstr(buf, "\r\n\r\n") + 4;
        char controls[MAX_TRACKS][512];
        uint32_t clocks[MAX_TRACKS];
        int nt = -1;
        for (char *line = strtok(sdp, "\r\n"); line; line = strtok(NULL, "\r\n")) {
            if (!strncmp(line, "m=", 2) && nt + 1 < MAX_TRACKS) {
                nt++;
                controls[nt][0] = 0;
                clocks[nt] = 90000;
            } else if (nt >= 0 && !strncmp(line, "a=control:", 10)) {
                snprintf(controls[nt], sizeof controls[nt], "%s", line + 10);
            } else if (nt >= 0 && !strncmp(line, "a=rtpmap:", 9)) {
                char *slash = strchr(line, '/');
                if (slash) clocks[nt] = (uint32_t)strtoul(slash + 1, NULL, 10);
            }
        }
        s->ntracks = nt + 1;
        for (int t = 0; t < s->ntracks; t++) {
            char turl[4096], transport[128];
            const char *c = controls[t];
            if (!strncmp(c, "rtsp://", 7)) snprintf(turl, sizeof turl, "%s", c);
            else if (!*c || !strcmp(c, "*")) snprintf(turl, sizeof turl, "%s", base);
            else snprintf(turl, sizeof turl, "%s%s%s", base, base[strlen(base) - 1] == '/' ? "" : "/", c);
            int rtp, rtcp, p;
            if (udp_pair(&rtp, &rtcp, &p)) die("no UDP port pair");
            snprintf(transport, sizeof transport, "Transport: RTP/AVP;unicast;client_port=%d-%d\r\n", p, p + 1);
            if (request(s, "SETUP", turl, transport, buf, sizeof buf) != 200) {
                fprintf(stderr, "session %d: SETUP %s refused:\n%s\n", i, turl, buf);
                return 1;
            }
            char *sid = strcasestr(buf, "\nSession:");
            if (sid && !s->id[0]) sscanf(sid + 9, " %127[^;\r\n]", s->id);
            s->t[t].fd = rtp;
            s->t[t].clock = clocks[t] ? clocks[t] : 90000;
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = ((uint64_t)i << 8) | (uint64_t)t};
            epoll_ctl(ep, EPOLL_CTL_ADD, rtp, &ev);
        }
        if (request(s, "PLAY", base, "Range: npt=0-\r\n", buf, sizeof buf) != 200) {
            fprintf(stderr, "session %d: PLAY refused:\n%s\n", i, buf);
            return 1;
        }
    }
    fprintf(stderr, "rtsp-probe: %d sessions playing %s\n", n, url);
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    static char bufs[BATCH][2048];
    for (int k = 0; k < BATCH; k++) {
        iov[k].iov_base = bufs[k];
        iov[k].iov_len = sizeof bufs[k];
        memset(&msgs[k], 0, sizeof msgs[k]);
        msgs[k].msg_hdr.msg_iov = &iov[k];
        msgs[k].msg_hdr.msg_iovlen = 1;
    }
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    struct epoll_event evs[256];
    while (now_ns() < end) {
        int ready = epoll_wait(ep, evs, 256, 100);
        for (int e = 0; e < ready; e++) {
            struct session *s = &ss[evs[e].data.u64 >> 8];
            struct track *t = &s->t[evs[e].data.u64 & 0xff];
            for (;;) {
                int got = recvmmsg(t->fd, msgs, BATCH, MSG_DONTWAIT, NULL);
                if (got <= 0) break;
                int64_t at = now_ns();
                for (int k = 0; k < got; k++) {
                    const unsigned char *p = (const unsigned char *)bufs[k];
                    if (msgs[k].msg_len < 12 || (p[0] >> 6) != 2) continue;
                    uint16_t seq = (uint16_t)(p[2] << 8 | p[3]);
                    uint32_t ts = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
                    if (!t->have) {
                        t->have = 1;
                        t->last_ts = ts;
                        t->ext = 0;
                        t->best = INT64_MAX;
                    } else {
                        uint16_t gap = (uint16_t)(seq - t->next_seq);
                        if (gap < 0x8000) t->lost += gap;
                        t->ext += (int32_t)(ts - t->last_ts);
                        t->last_ts = ts;
                    }
                    if ((uint16_t)(seq + 1 - t->next_seq) < 0x8000 || t->packets == 0) t->next_seq = (uint16_t)(seq + 1);
                    int64_t media = t->ext * 1000000000 / (int64_t)t->clock;
                    int64_t off = at - media;
                    if (off < t->best) t->best = off;
                    if (off - t->best > t->worst) t->worst = off - t->best;
                    t->packets++;
                    t->bytes += msgs[k].msg_len;
                }
            }
        }
    }
    int bad = 0;
    double worst_all = 0;
    uint64_t packets = 0, lost = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        struct session *s = &ss[i];
        double worst = 0;
        uint64_t sp = 0;
        for (int t = 0; t < s->ntracks; t++) {
            if (s->t[t].worst / 1e6 > worst) worst = s->t[t].worst / 1e6;
            sp += s->t[t].packets;
            lost += s->t[t].lost;
            bytes += s->t[t].bytes;
        }
        packets += sp;
        if (worst > worst_all) worst_all = worst;
        if (sp == 0 || worst > limit_ms) bad++;
        printf("session %d: %llu packets, lateness max %.1f ms%s\n", i, (unsigned long long)sp,
               worst, sp == 0 ? " (no packets)" : worst > limit_ms ? " (late)" : "");
        request(s, "TEARDOWN", url, NULL, buf, sizeof buf);
        close(s->ctl);
    }
    printf("rtsp-probe: %d sessions, %llu packets, %llu lost, %.1f Mb/s, lateness max %.1f ms, "
           "%d over %.0f ms or without packets\n",
           n, (unsigned long long)packets, (unsigned long long)lost, bytes * 8 / seconds / 1e6,
           worst_all, bad, limit_ms);
    return bad ? 1 : 0;
}
