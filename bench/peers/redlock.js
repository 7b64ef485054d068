// node-redlock (v4) on N Redis servers, for the RedLock rows of `make bench`.
//
// The shared peer script (../shared/peers/nodelocks.js) talks to one server on
// port 6379; this one takes the servers from PEER_REDIS_PORTS (comma-separated
// loopback ports, default 6379), so node-redlock and `baton bench -u
// redlock://...` run on the same quorum. Same Redlock settings as
// nodelocks.js (retry every 10 ms ± 5, drift factor 0.01, 30 s leases), and
// the workloads and JSON field names of `baton bench`:
//
//   NODE_PATH=DIR/node_modules PEER_REDIS_PORTS=p1,p2,p3 node redlock.js uncontended N
//   ...                                                  node redlock.js contended CLIENTS SECONDS
//   ...                                                  node redlock.js handoff ROUNDS
//
// handoff: two processes take turns; the holder keeps the lock 5 ms, notes the
// time and releases while the other waits in acquire; the latency is from that
// release to the waiter's grant (process.hrtime is CLOCK_MONOTONIC, shared by
// the processes). The two share the release time and the last owner through a
// 16-byte file (page cache, read and written at fixed offsets).
'use strict';
const { fork } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const Redis = require('ioredis');
const Redlock = require('redlock');

const ports = (process.env.PEER_REDIS_PORTS || '6379').split(',').filter(Boolean).map(Number);
const [wl, a1, a2] = process.argv.slice(2);
const now = () => Number(process.hrtime.bigint()) / 1e9;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => xs[Math.min(xs.length - 1, Math.floor(xs.length * p))];

function client() {
  const servers = ports.map((port) => new Redis({ host: '127.0.0.1', port }));
  const rl = new Redlock(servers, { retryCount: -1, retryDelay: 10, retryJitter: 5, driftFactor: 0.01 });
  return {
    acquire: (name) => rl.lock('locks:' + name, 30000),
    release: (l) => l.unlock(),
    close: () => servers.forEach((s) => s.disconnect()),
  };
}

function emit(o) {
  console.log(JSON.stringify(Object.assign({ peer: 'node-redlock', servers: ports.length }, o)));
}

async function uncontended(n) {
  const c = client();
  const name = 'u' + process.pid;
  for (let i = 0; i < Math.min(n / 10, 200); i++) await c.release(await c.acquire(name));
  const lat = [];
  const t0 = now();
  for (let i = 0; i < n; i++) {
    const a = now();
    const l = await c.acquire(name);
    lat.push(now() - a);
    await c.release(l);
  }
  const dt = now() - t0;
  c.close();
  lat.sort((x, y) => x - y);
  emit({ workload: 'uncontended', n, pairs_per_s: +(n / dt).toFixed(1),
         acquire_p50_us: +(pct(lat, 0.5) * 1e6).toFixed(1), acquire_p99_us: +(pct(lat, 0.99) * 1e6).toFixed(1) });
}

// contended: CLIENTS processes on one lock; inside, a non-atomic
// read-modify-write of a counter file (counter_ok: no increment was lost).
async function contendedWorker(seconds, counter, startAt) {
  const c = client();
  while (Date.now() / 1000 < startAt) await sleep(1);
  const end = startAt + seconds;
  const waits = [];
  let done = 0;
  while (Date.now() / 1000 < end) {
    const a = now();
    const l = await c.acquire('contended');
    waits.push(now() - a);
    const v = parseInt(fs.readFileSync(counter, 'utf8') || '0', 10);
    fs.writeFileSync(counter, String(v + 1));
    await c.release(l);
    done++;
  }
  c.close();
  process.send({ done, waits }, () => process.exit(0));
}

function contended(clients, seconds) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redlock-peer.'));
  const counter = path.join(dir, 'counter');
  fs.writeFileSync(counter, '0');
  const startAt = Date.now() / 1000 + 2;   // every worker connected before the clock starts
  const res = [];
  for (let i = 0; i < clients; i++) {
    const w = fork(__filename, ['contended-worker', String(seconds), counter, String(startAt)]);
    w.on('message', (m) => {
      res.push(m);
      if (res.length < clients) return;
      const total = res.reduce((s, x) => s + x.done, 0);
      const waits = res.flatMap((x) => x.waits).sort((x, y) => x - y);
      const fin = parseInt(fs.readFileSync(counter, 'utf8'), 10);
      fs.rmSync(dir, { recursive: true, force: true });
      const per = res.map((x) => x.done);
      emit({ workload: 'contended', clients, seconds, handoffs_per_s: +(total / seconds).toFixed(1),
             counter_ok: fin === total, wait_p50_ms: +(pct(waits, 0.5) * 1e3).toFixed(2),
             wait_p99_ms: +(pct(waits, 0.99) * 1e3).toFixed(2), min_per_client: Math.min(...per),
             max_per_client: Math.max(...per) });
    });
  }
}

// The 16-byte file of the handoff: [0..8) release time (double), [8..12) the
// last owner (int32, -1 none), [12], [13] worker 0 resp. 1 is ready.
function shm(file) {
  const fd = fs.openSync(file, 'r+');
  const b = Buffer.alloc(16);
  const rd = () => { fs.readSync(fd, b, 0, 16, 0); return b; };
  return {
    tRel: () => rd().readDoubleLE(0),
    setTRel: (t) => { const x = Buffer.alloc(8); x.writeDoubleLE(t); fs.writeSync(fd, x, 0, 8, 0); },
    owner: () => rd().readInt32LE(8),
    setOwner: (v) => { const x = Buffer.alloc(4); x.writeInt32LE(v); fs.writeSync(fd, x, 0, 4, 8); },
    ready: () => { const x = rd(); return x[12] + x[13]; },
    setReady: (me) => fs.writeSync(fd, Buffer.from([1]), 0, 1, 12 + me),
  };
}

async function handoffWorker(rounds, file, me) {
  const s = shm(file);
  const c = client();
  await c.release(await c.acquire('handoff-warm-' + me));   // connected before the first round
  s.setReady(me);
  for (const dl = now() + 30; s.ready() !== 2; await sleep(1))
    if (now() > dl) throw new Error('the other worker did not start in 30 s');
  const lat = [];
  for (let i = 0; i < rounds; i++) {
    const l = await c.acquire('handoff');
    const t = now();
    const last = s.owner();
    s.setOwner(me);
    if (last !== me && last !== -1) lat.push(t - s.tRel());
    await sleep(5);                      // long enough for the other side to wait in acquire
    s.setTRel(now());
    await c.release(l);
    // let the waiter win; do not barge
    for (const dl = now() + 2; s.owner() === me && now() < dl; ) await sleep(0.2);
  }
  c.close();
  process.send({ lat }, () => process.exit(0));
}

function handoff(rounds) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redlock-peer.'));
  const file = path.join(dir, 'shm');
  const init = Buffer.alloc(16);
  init.writeInt32LE(-1, 8);
  fs.writeFileSync(file, init);
  const res = [];
  for (let i = 0; i < 2; i++) {
    const w = fork(__filename, ['handoff-worker', String(rounds), file, String(i)]);
    w.on('message', (m) => {
      res.push(m);
      if (res.length < 2) return;
      fs.rmSync(dir, { recursive: true, force: true });
      const lat = res.flatMap((x) => x.lat).sort((x, y) => x - y);
      emit({ workload: 'handoff', rounds, samples: lat.length, handoff_p50_us: +(pct(lat, 0.5) * 1e6).toFixed(1),
             handoff_p99_us: +(pct(lat, 0.99) * 1e6).toFixed(1) });
    });
  }
}

const fail = (e) => { console.error('redlock.js: ' + (e && e.stack || e)); process.exit(1); };
if (wl === 'uncontended') uncontended(+a1).catch(fail);
else if (wl === 'contended') contended(+a1, +a2);
else if (wl === 'handoff') handoff(+a1);
else if (wl === 'contended-worker') contendedWorker(+a1, a2, +process.argv[5]).catch(fail);
else if (wl === 'handoff-worker') handoffWorker(+a1, a2, +process.argv[5]).catch(fail);
else fail('usage: redlock.js uncontended N | contended CLIENTS SECONDS | handoff ROUNDS');
