import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

// JitBurn is a JVM service in miniature for the end-to-end test: two threads
// with names longer than Linux's 15-byte comm burn in their own methods,
// which the JIT compiles on the stack (OSR: each method is entered once and
// never returns, so it is never inlined into a caller), while the main
// thread keeps the JIT busy compiling other code, as a service does for its
// whole life.
public class JitBurn {
    static volatile long sink;

    static long burnAlpha(long n) {
        long x = n;
        for (long i = 0; i < Long.MAX_VALUE; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            if ((i & 0xffffff) == 0) {
                sink = x;
            }
        }
        return x;
    }

    static long burnBeta(long n) {
        long x = n;
        for (long i = 0; i < Long.MAX_VALUE; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            if ((i & 0xffffff) == 0) {
                sink = x;
            }
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        Thread a = new Thread(() -> sink = burnAlpha(1), "jitburn-alpha-burner-thread");
        Thread b = new Thread(() -> sink = burnBeta(2), "jitburn-beta-burner-thread");
        a.setDaemon(true);
        b.setDaemon(true);
        a.start();
        b.start();
        System.out.println("ready " + ProcessHandle.current().pid());
        System.out.flush();
        // Other work, lightly: new code paths keep being compiled.
        for (int round = 0; System.in.available() == 0; round++) {
            Map<String, List<Integer>> m = new HashMap<>();
            for (int i = 0; i < 2000; i++) {
                m.computeIfAbsent("k" + (i % (round % 50 + 1)), k -> new ArrayList<>()).add(i);
            }
            sink += m.values().stream().mapToInt(List::size).sum() + String.format("%d-%s", round, m.size()).length();
            Thread.sleep(20);
        }
    }
}
