// nofp.cc is the C++ target without frame pointers: the shape of nofp.c,
// with an inlined std::sort of strings and an exception thrown and caught
// every seventh call, at -O2 (g++ omits frame pointers there too), its
// second thread a std::thread.
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>
volatile unsigned long sink;
__attribute__((noinline)) void thrower(int i) {
	if (i % 7 == 0) throw std::runtime_error("seventh");
	sink += i;
}
__attribute__((noinline)) unsigned long level3(int i) {
	std::vector<std::string> v;
	for (int k = 0; k < 200; k++) v.push_back(std::to_string((k * 7919 + i) % 1000));
	std::sort(v.begin(), v.end());
	try { thrower(i); } catch (const std::exception &e) { sink += e.what()[0]; }
	return v[3].size();
}
__attribute__((noinline)) unsigned long level2(int i) { unsigned long s = level3(i); sink += s; return s ^ 3; }
__attribute__((noinline)) unsigned long level1(int i) { unsigned long s = level2(i); sink ^= s; return s + 1; }
__attribute__((noinline)) static void worker() { for (int i = 0;; i++) sink += level1(i); }
int main() {
	std::thread t(worker);
	printf("ready %d\n", getpid());
	fflush(stdout);
	worker();
}
