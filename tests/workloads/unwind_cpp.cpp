// unwind_cpp - a C++ workload built without frame pointers (g++ -O2
// -fomit-frame-pointer): templates and lambdas inlined into their callers,
// virtual calls, and exceptions thrown and caught on the hot path.
// main -> Pipeline::run -> Stage::process (virtual) -> ... usage: unwind_cpp SECONDS
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

static double cpu_now()
{
	timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct Stage {
	virtual ~Stage() = default;
	virtual uint64_t process(std::vector<uint64_t> &v) = 0;
};

struct SortStage : Stage {
	__attribute__((noinline)) uint64_t process(std::vector<uint64_t> &v) override
	{
		std::sort(v.begin(), v.end(), [](uint64_t a, uint64_t b) { return (a ^ 0x5555) < (b ^ 0x5555); });
		return v[v.size() / 2];
	}
};

struct ValidateStage : Stage {
	__attribute__((noinline)) static void check(uint64_t x)
	{
		if ((x & 0xff) == 0x2a)
			throw std::runtime_error("bad record " + std::to_string(x));
	}
	__attribute__((noinline)) uint64_t process(std::vector<uint64_t> &v) override
	{
		uint64_t rejected = 0;
		for (uint64_t x : v) {
			try {
				check(x);
			} catch (const std::runtime_error &e) {
				rejected += e.what()[0];
			}
		}
		return rejected;
	}
};

struct Pipeline {
	std::vector<std::unique_ptr<Stage>> stages;
	__attribute__((noinline)) uint64_t run(uint64_t seed)
	{
		std::vector<uint64_t> v(4096);
		for (auto &x : v) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			x = seed >> 20;
		}
		uint64_t acc = 0;
		for (auto &s : stages)
			acc += s->process(v);
		return acc;
	}
};

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	Pipeline p;
	p.stages.push_back(std::make_unique<SortStage>());
	p.stages.push_back(std::make_unique<ValidateStage>());
	volatile uint64_t sink = 0;
	double t0 = cpu_now();
	uint64_t seed = 7;
	while (cpu_now() - t0 < seconds)
		sink = sink + p.run(seed++);
	std::printf("{\"cpu_seconds\": %.3f}\n", cpu_now() - t0);
	return 0;
}
