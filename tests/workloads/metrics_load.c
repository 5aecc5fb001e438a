/* metrics_load - a process of known resource use, for the metrics tests:
 * burns one core for SECONDS, holds RSS_MIB of touched memory, and writes
 * WRITE_MIB_PER_S MiB per second (fsync'd) to PATH.
 *   metrics_load SECONDS RSS_MIB WRITE_MIB_PER_S PATH
 * Prints {"pid": ..., "written": bytes} when done. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: metrics_load SECONDS RSS_MIB WRITE_MIB_PER_S PATH\n");
		return 2;
	}
	double seconds = atof(argv[1]);
	size_t rss = (size_t)atol(argv[2]) << 20;
	double rate = atof(argv[3]) * 1048576.0;
	char *mem = malloc(rss ? rss : 1);
	if (!mem)
		return 1;
	for (size_t i = 0; i < rss; i += 4096)
		mem[i] = (char)(i >> 12);
	int fd = open(argv[4], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(argv[4]);
		return 1;
	}
	static char chunk[1 << 16];
	memset(chunk, 'm', sizeof(chunk));
	double start = now(), next_write = start;
	unsigned long long written = 0;
	volatile unsigned long long spin = 0;
	while (now() - start < seconds) {
		for (int i = 0; i < 100000; i++)
			spin += (unsigned long long)i * 7;
		double t = now();
		if (t >= next_write && rate > 0) {
			/* 1/10 s worth of bytes every 100 ms */
			size_t want = (size_t)(rate / 10);
			while (want) {
				size_t n = want < sizeof(chunk) ? want : sizeof(chunk);
				if (write(fd, chunk, n) != (ssize_t)n) {
					perror("write");
					return 1;
				}
				written += n;
				want -= n;
			}
			if (fsync(fd) != 0) {
				perror("fsync");
				return 1;
			}
			next_write += 0.1;
		}
	}
	close(fd);
	unsigned long long sum = 0;
	for (size_t i = 0; i < rss; i += 4096)
		sum += (unsigned char)mem[i];
	printf("{\"pid\": %d, \"written\": %llu, \"sum\": %llu}\n", getpid(), written, sum);
	free(mem);
	return 0;
}
