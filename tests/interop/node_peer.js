// The npm clients' side of tests/interop/foreign.py: one real npm client takes
// its lock (or permit, or leadership) in a loop and runs tests/interop/cs.sh
// inside it, while `baton` contends for the same name.
//
//   node node_peer.js CLIENT TARGET NAME DIR KIND [PERMITS]
//
// CLIENT: etcd3-lock       etcd3's client.lock(NAME)           (TARGET = host:port)
//         etcd3-election   etcd3's client.election(NAME).campaign()
//         redlock          node-redlock 4 over one ioredis client (TARGET = port)
//         redis-semaphore  redis-semaphore's Semaphore(NAME, PERMITS)
// KIND: the cs.sh section (exclusive | permit). Loops until DIR/stop exists
// (at most 3000 sections or 45 s), 0-8 ms apart; DIR/ready-node once connected.
// Prints "sections=N errors=E" (an error = an acquire that failed or timed out
// after 20 s; the first few are printed on stderr). NODE_PATH finds the modules.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const [client, target, name, dir, kind, permitsArg] = process.argv.slice(2);
const permits = Number(permitsArg || 0);
const CS = path.join(__dirname, 'cs.sh');
const WHO = 'node-' + client;
const end = Date.now() + 45000;
let sections = 0;
let errors = 0;

function section() {
  execFileSync('/bin/sh', [CS, kind, dir, WHO, String(permits)], { stdio: 'inherit' });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const more = () => sections < 3000 && Date.now() < end && !fs.existsSync(path.join(dir, 'stop'));
function failed(e) {
  errors++;
  if (errors <= 3) console.error(`${WHO}: ${e && e.message ? e.message : e}`);
}

async function withTimeout(p, ms, what) {
  let t;
  const timer = new Promise((_, rej) => { t = setTimeout(() => rej(new Error(what + ' timed out')), ms); });
  try {
    return await Promise.race([p, timer]);
  } finally {
    clearTimeout(t);
  }
}

async function main() {
  let step, close;
  if (client === 'etcd3-lock' || client === 'etcd3-election') {
    const { Etcd3 } = require('etcd3');
    const etcd = new Etcd3({ hosts: 'http://' + target });
    await etcd.get('baton-interop-probe').string();
    close = () => etcd.close();
    if (client === 'etcd3-lock') {
      step = async () => {
        const lock = etcd.lock(name).ttl(10);
        await withTimeout(lock.acquire(), 20000, 'lock');
        try { section(); } finally { await lock.release(); }
      };
    } else {
      const election = etcd.election(name, 10);
      step = async () => {
        const campaign = election.campaign(WHO);
        await withTimeout(new Promise((res, rej) => { campaign.on('elected', res); campaign.on('error', rej); }),
          20000, 'campaign');
        try { section(); } finally { await campaign.resign(); }
      };
    }
  } else if (client === 'redlock') {
    const Redis = require('ioredis');
    const Redlock = require('redlock');
    const redis = new Redis({ host: '127.0.0.1', port: Number(target) });
    const redlock = new Redlock([redis], { retryCount: 2000, retryDelay: 10, retryJitter: 5, driftFactor: 0.01 });
    redlock.on('clientError', () => {});
    close = () => redis.disconnect();
    step = async () => {
      const lock = await redlock.lock(name, 10000);
      try { section(); } finally { await lock.unlock(); }
    };
  } else if (client === 'redis-semaphore') {
    const Redis = require('ioredis');
    const { Semaphore } = require('redis-semaphore');
    const redis = new Redis({ host: '127.0.0.1', port: Number(target) });
    close = () => redis.disconnect();
    step = async () => {
      const sem = new Semaphore(redis, name, permits, { acquireTimeout: 20000, lockTimeout: 10000, retryInterval: 5 });
      await sem.acquire();
      try { section(); } finally { await sem.release(); }
    };
  } else {
    console.error('node_peer.js: unknown client ' + client);
    process.exit(64);
  }
  fs.writeFileSync(path.join(dir, 'ready-node'), '');
  while (more()) {
    try {
      await step();
      sections++;
    } catch (e) {
      failed(e);
    }
    await sleep(Math.floor(Math.random() * 9));
  }
  console.log(`sections=${sections} errors=${errors}`);
  close();
  process.exit(0);
}
main().catch((e) => { console.error(WHO + ': ' + (e && e.stack ? e.stack : e)); process.exit(2); });
