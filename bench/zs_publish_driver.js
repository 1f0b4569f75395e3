// zeroshot's own publish path for bench/perf_bench.py: MessageBus.publish -> Ledger.append
// (src/message-bus.js publish(), src/ledger.js append(): better-sqlite3, journal_mode=WAL,
// synchronous=NORMAL set by the Ledger's constructor), one process, one message per call.
// Reads commands on stdin, one per line:
//   "publish <dbpath> <drafts.jsonl>" -> {"count", "stored", "wall_ms", "cpu_ms", "sqlite",
//   "better_sqlite3"} for publishing every
//   draft of the file (one JSON object a line: topic, sender, receiver, content, metadata)
//   into a fresh ledger at <dbpath> under the cluster named after the file;
//   "quit".
// The drafts are parsed before the clock starts; the clock covers the publishes only.
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const ZS = process.env.ZS_ROOT;
if (!ZS) {
  console.error('set ZS_ROOT to a zeroshot checkout with better-sqlite3 installed');
  process.exit(2);
}
const Ledger = require(path.join(ZS, 'src/ledger.js'));
const MessageBus = require(path.join(ZS, 'src/message-bus.js'));

function publishAll(dbPath, draftsPath) {
  const clusterId = path.basename(dbPath, '.db');
  const drafts = fs
    .readFileSync(draftsPath, 'utf8')
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => ({ ...JSON.parse(line), cluster_id: clusterId }));
  const ledger = new Ledger(dbPath);
  const bus = new MessageBus(ledger);
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (const draft of drafts) bus.publish(draft);
  const t1 = process.hrtime.bigint();
  const cpu = process.cpuUsage(cpu0);
  const stored = ledger.db.prepare('SELECT COUNT(*) AS n FROM messages WHERE cluster_id = ?').get(clusterId).n;
  const sqlite = ledger.db.prepare('SELECT sqlite_version() AS v').get().v;
  const betterSqlite3 = require(require.resolve('better-sqlite3/package.json', { paths: [ZS] })).version;
  ledger.close();
  return {
    sqlite,
    better_sqlite3: betterSqlite3,
    count: drafts.length,
    stored,
    wall_ms: Number(t1 - t0) / 1e6,
    cpu_ms: (cpu.user + cpu.system) / 1000,
  };
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const [cmd, dbPath, draftsPath] = line.trim().split(/\s+/);
  if (cmd === 'publish') {
    process.stdout.write(JSON.stringify(publishAll(dbPath, draftsPath)) + '\n');
  } else if (cmd === 'quit') {
    process.exit(0);
  }
});
