/* probe HOST GO_PORT PORT...: the node tests' NetworkPolicy probe (static, no libc resolver).
 * Connects to HOST:GO_PORT until it answers and reads one byte (the test sends it once the
 * firewall holds the pod's rules), then tries HOST:PORT for each PORT with a 3 s timeout and
 * writes "PORT=ok|refused|timeout|error" lines to /dev/termination-log and stdout. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *try_connect(const char *host, int port, int timeout_ms, int *fd_out) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return "error";
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) goto ok;
  if (errno != EINPROGRESS) { close(fd); return errno == ECONNREFUSED ? "refused" : "error"; }
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  if (poll(&p, 1, timeout_ms) != 1) { close(fd); return "timeout"; }
  int err = 0; socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err) { close(fd); return err == ECONNREFUSED ? "refused" : "error"; }
ok:
  fcntl(fd, F_SETFL, 0);
  if (fd_out) *fd_out = fd; else close(fd);
  return "ok";
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: probe HOST GO_PORT PORT...\n"); return 2; }
  int go = -1; char c;
  const char *r;
  while (strcmp(r = try_connect(argv[1], atoi(argv[2]), 3000, &go), "ok") != 0) {
    fprintf(stderr, "go port %s: %s\n", argv[2], r);
    sleep(1);
  }
  if (read(go, &c, 1) != 1) { perror("reading the go byte"); return 3; }
  close(go);
  char out[4096] = ""; size_t n = 0;
  for (int i = 3; i < argc; i++)
    n += snprintf(out + n, sizeof out - n, "%s=%s\n", argv[i], try_connect(argv[1], atoi(argv[i]), 3000, NULL));
  fputs(out, stdout);
  FILE *f = fopen("/dev/termination-log", "w");
  if (f) { fputs(out, f); fclose(f); }
  return 0;
}
