// Burn is the JVM the hotspot tests attach to: two threads with names longer
// than Linux's 15-byte comm, each burning CPU in its own static method so that
// the JIT compiles both and the perf map has to name them.
public class Burn {
    static volatile long sink;

    static long burnAlpha(long n) {
        long x = n;
        for (int i = 0; i < 1000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    static long burnBeta(long n) {
        long x = n;
        for (int i = 0; i < 1000; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        Thread a = new Thread(() -> {
            long x = 1;
            for (;;) {
                x = burnAlpha(x);
                sink = x;
                pause();
            }
        }, "perfprof-burner-alpha \"quoted\" thread");
        Thread b = new Thread(() -> {
            long x = 2;
            for (;;) {
                x = burnBeta(x);
                sink = x;
                pause();
            }
        }, "perfprof-burner-beta-with-a-long-name");
        a.setDaemon(true);
        b.setDaemon(true);
        a.start();
        b.start();
        System.out.println("ready " + ProcessHandle.current().pid());
        System.out.flush();
        // Stay alive until the test closes stdin or kills us.
        while (System.in.read() >= 0) {
        }
    }

    // pause keeps the burn light: the machine running the tests is small and
    // shared, and the JIT needs only a few thousand calls to compile.
    static void pause() {
        try {
            Thread.sleep(1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
