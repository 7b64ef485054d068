/*
 * The real Apache Curator (Debian's libcurator-recipes-java) side of
 * tests/interop/curator.sh: Curator recipes on a ZooKeeper path while `baton`
 * contends for the same name, each side entering the same critical sections
 * (tests/interop/cs.sh is baton's copy of them).
 *
 *   java -cp CLASSES:JARS CuratorInterop CONNECT ZPATH DIR ROLE...
 *
 * One thread per ROLE, all on one CuratorFramework client:
 *   mutex       InterProcessMutex(ZPATH)                   -> exclusive section
 *   read        InterProcessReadWriteLock(ZPATH).readLock  -> shared section
 *   write       InterProcessReadWriteLock(ZPATH).writeLock -> exclusive section
 *   sem:N       InterProcessSemaphoreV2(ZPATH, N)          -> permit section (at most N)
 *   latch       LeaderLatch(ZPATH), closed after each term -> exclusive section
 *   selector    LeaderSelector(ZPATH), one term per start  -> exclusive section
 *
 * The sections keep their evidence in DIR (a directory on local disk):
 *   exclusive  mkdir DIR/x (already there = an overlap), no DIR/readers/* at
 *              entry or exit (else an overlap), counter DIR/counter read,
 *              held 5 ms, written back + 1, rmdir DIR/x;
 *   shared     DIR/readers/<id> created, DIR/x present at entry or after 5 ms
 *              = an overlap, removed;
 *   permit     DIR/holders/<id> created, more than N entries = an overlap,
 *              held 10 ms, removed.
 * Every piece of evidence appends a line "curator-ROLE#SECTION ROLE: what" to
 * DIR/overlaps; the tests count the sections that saw one.
 *
 * DIR/ready-curator is created once the client is connected and the recipes
 * built; the threads loop until DIR/stop exists (at most 3000 sections or
 * 45 s each), sleeping 0-8 ms between sections so both sides interleave.
 * On exit prints "curator ROLE sections=N" per role and exits 0, or 2 when a
 * recipe call failed (message on stderr).
 */
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Stream;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

public class CuratorInterop {
    static final long MAX_MS = 45_000;
    static final int MAX_SECTIONS = 3000;
    static Path dir;
    static final AtomicBoolean failed = new AtomicBoolean(false);

    static final java.util.concurrent.atomic.AtomicLong sectionNo = new java.util.concurrent.atomic.AtomicLong();
    static final ThreadLocal<Long> section = ThreadLocal.withInitial(() -> 0L);

    static void overlap(String what) {
        /* "curator ROLE rest" -> "curator-ROLE#SECTION ROLE: rest" */
        String[] w = what.split(" ", 3);
        String line = w[0] + "-" + w[1] + "#" + section.get() + " " + w[1] + ":" + (w.length > 2 ? " " + w[2] : "");
        try {
            Files.write(dir.resolve("overlaps"), (line + "\n").getBytes(StandardCharsets.UTF_8),
                        StandardOpenOption.CREATE, StandardOpenOption.APPEND, StandardOpenOption.WRITE);
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    static long count(Path d) throws IOException {
        if (!Files.isDirectory(d)) return 0;
        try (Stream<Path> s = Files.list(d)) {
            return s.count();
        }
    }

    static void sleepMs(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void exclusive(String role) throws IOException {
        Path x = dir.resolve("x");
        try {
            Files.createDirectory(x);
        } catch (FileAlreadyExistsException e) {
            overlap("curator " + role + " entered while x was held");
        }
        if (count(dir.resolve("readers")) > 0) overlap("curator " + role + " entered while a reader was in");
        Path c = dir.resolve("counter");
        long n = 0;
        try {
            n = Long.parseLong(new String(Files.readAllBytes(c), StandardCharsets.UTF_8).trim());
        } catch (NoSuchFileException e) {
            n = 0;
        }
        sleepMs(5);
        Path tmp = dir.resolve("counter.curator." + Thread.currentThread().getId());
        Files.write(tmp, (Long.toString(n + 1) + "\n").getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, c, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                   java.nio.file.StandardCopyOption.ATOMIC_MOVE);
        if (count(dir.resolve("readers")) > 0) overlap("curator " + role + " saw a reader while holding");
        try {
            Files.delete(x);
        } catch (NoSuchFileException e) {
            overlap("curator " + role + " x was removed under it");
        }
    }

    static void shared(String role) throws IOException {
        Path r = dir.resolve("readers").resolve("curator-" + UUID.randomUUID());
        Files.createDirectories(r.getParent());
        Files.createFile(r);
        if (Files.exists(dir.resolve("x"))) overlap("curator " + role + " entered while a writer was in");
        sleepMs(5);
        if (Files.exists(dir.resolve("x"))) overlap("curator " + role + " saw a writer while reading");
        Files.delete(r);
    }

    static void permit(String role, int n) throws IOException {
        Path h = dir.resolve("holders").resolve("curator-" + UUID.randomUUID());
        Files.createDirectories(h.getParent());
        Files.createFile(h);
        long in = count(h.getParent());
        if (in > n) overlap("curator " + role + " saw " + in + " holders of " + n + " permits");
        sleepMs(10);
        Files.delete(h);
    }

    interface Section {
        void run() throws Exception;
    }

    static int loop(String role, Section s) throws Exception {
        long end = System.currentTimeMillis() + MAX_MS;
        int done = 0;
        while (done < MAX_SECTIONS && System.currentTimeMillis() < end && !Files.exists(dir.resolve("stop"))) {
            section.set(sectionNo.incrementAndGet());
            s.run();
            done++;
            sleepMs(ThreadLocalRandom.current().nextInt(9));
        }
        return done;
    }

    static int runRole(CuratorFramework cf, String zpath, String role) throws Exception {
        if (role.equals("mutex")) {
            InterProcessMutex m = new InterProcessMutex(cf, zpath);
            return loop(role, () -> {
                m.acquire();
                try {
                    exclusive(role);
                } finally {
                    m.release();
                }
            });
        }
        if (role.equals("read") || role.equals("write")) {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(cf, zpath);
            InterProcessMutex m = role.equals("read") ? rw.readLock() : rw.writeLock();
            return loop(role, () -> {
                m.acquire();
                try {
                    if (role.equals("read")) shared(role); else exclusive(role);
                } finally {
                    m.release();
                }
            });
        }
        if (role.startsWith("sem:")) {
            int n = Integer.parseInt(role.substring(4));
            InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(cf, zpath, n);
            return loop(role, () -> {
                Lease l = sem.acquire();
                try {
                    permit(role, n);
                } finally {
                    sem.returnLease(l);
                }
            });
        }
        if (role.equals("latch")) {
            String id = "curator-latch-" + Thread.currentThread().getId();
            return loop(role, () -> {
                LeaderLatch latch = new LeaderLatch(cf, zpath, id);
                latch.start();
                try {
                    latch.await();
                    exclusive(role);
                } finally {
                    latch.close();
                }
            });
        }
        if (role.equals("selector")) {
            return loop(role, () -> {
                java.util.concurrent.CountDownLatch term = new java.util.concurrent.CountDownLatch(1);
                Exception[] err = new Exception[1];
                LeaderSelector sel = new LeaderSelector(cf, zpath, new LeaderSelectorListenerAdapter() {
                    @Override
                    public void takeLeadership(CuratorFramework c) {
                        try {
                            exclusive(role);
                        } catch (Exception e) {
                            err[0] = e;
                        }
                        term.countDown();
                    }
                });
                sel.setId("curator-selector");
                sel.start();
                try {
                    if (!term.await(MAX_MS, TimeUnit.MILLISECONDS)) throw new IOException("no leadership in time");
                } finally {
                    sel.close();
                }
                if (err[0] != null) throw err[0];
            });
        }
        throw new IllegalArgumentException("unknown role " + role);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: CuratorInterop CONNECT ZPATH DIR ROLE...");
            System.exit(64);
        }
        String connect = args[0], zpath = args[1];
        dir = Paths.get(args[2]);
        CuratorFramework cf = CuratorFrameworkFactory.builder().connectString(connect)
            .sessionTimeoutMs(10_000).connectionTimeoutMs(10_000).retryPolicy(new RetryNTimes(3, 200)).build();
        cf.start();
        if (!cf.blockUntilConnected(20, TimeUnit.SECONDS)) {
            System.err.println("curator: no connection to " + connect);
            System.exit(2);
        }
        List<Thread> threads = new ArrayList<>();
        String[] out = new String[args.length - 3];
        for (int i = 3; i < args.length; i++) {
            final String role = args[i];
            final int k = i - 3;
            Thread t = new Thread(() -> {
                try {
                    out[k] = "curator " + role + " sections=" + runRole(cf, zpath, role);
                } catch (Exception e) {
                    failed.set(true);
                    System.err.println("curator " + role + ": " + e);
                    e.printStackTrace();
                    out[k] = "curator " + role + " failed";
                }
            });
            threads.add(t);
        }
        Files.createFile(dir.resolve("ready-curator"));
        for (Thread t : threads) t.start();
        for (Thread t : threads) t.join();
        for (String s : out) System.out.println(s);
        cf.close();
        System.exit(failed.get() ? 2 : 0);
    }
}
