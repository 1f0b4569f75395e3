// The scope of one logic script (SPEC §7.2), built in a fresh QuickJS runtime for every
// evaluation and run before the script.
//
// Python hands in three global strings, which this file reads and then removes:
//   __zsScope  JSON {message, result, agent, cluster: {id, agents}}
//   __zsIndex  JSON columns of the ledger view, one entry per message, oldest first:
//              {names, sender, receiver, timestamp, start, topics}; sender and receiver are
//              positions in `names`, message i is blob[start[i], start[i + 1]), and
//              topics[name] lists the positions of the messages on that topic
//   __zsBlob   the JSON text of every message of the view, back to back (ASCII only)
// Filters read the columns; a message is parsed from the blob only when a query returns it, so
// a script that reads one topic never pays for the rest of the view. Each query returns new
// objects, as zeroshot's SQLite ledger does: a script that edits a message edits its own copy.
//
// Afterwards the global scope holds what zeroshot's sandbox holds — message,
// triggeringMessage, result, agent, ledger, cluster, helpers, console — and __zsRun, which runs
// the script's function and reports its outcome to Python as one JSON string.
(function (global) {
  'use strict';

  // Kept here so that a script replacing JSON.parse or JSON.stringify only breaks itself.
  const parse = JSON.parse;
  const stringify = JSON.stringify;

  const scope = parse(global.__zsScope);
  const index = parse(global.__zsIndex);
  const blob = global.__zsBlob;
  delete global.__zsScope;
  delete global.__zsIndex;
  delete global.__zsBlob;

  const size = index.timestamp.length;
  const codes = new Map(index.names.map((name, code) => [name, code]));
  const topics = new Map(Object.entries(index.topics));
  const everyPosition = Array.from({ length: size }, (_, position) => position);

  function messageAt(position) {
    return parse(blob.substring(index.start[position], index.start[position + 1]));
  }

  // ---- ledger ---------------------------------------------------------------------------------

  // Like zeroshot's ledger, a criterion whose value is falsy is no criterion at all, and
  // `since` / `until` take a number of milliseconds or anything `new Date()` reads.
  function time(value) {
    return typeof value === 'number' ? value : new Date(value).getTime();
  }

  function code(name) {
    const found = codes.get(String(name));
    return found === undefined ? -1 : found;
  }

  // A query in two steps: the candidates (the topic's own positions when a topic is asked for,
  // as most scripts do), then one test per candidate, or none when nothing else is asked.
  function plan(criteria) {
    const c = criteria || {};
    const candidates = c.topic ? topics.get(String(c.topic)) || [] : everyPosition;
    const sender = c.sender ? code(c.sender) : null;
    const receiver = c.receiver ? code(c.receiver) : null;
    const since = c.since ? time(c.since) : null;
    const until = c.until ? time(c.until) : null;
    const unfiltered = sender === null && receiver === null && since === null && until === null;
    const test = unfiltered
      ? null
      : (p) =>
          (sender === null || index.sender[p] === sender) &&
          (receiver === null || index.receiver[p] === receiver) &&
          (since === null || index.timestamp[p] >= since) &&
          (until === null || index.timestamp[p] <= until);
    return { candidates, test };
  }

  // The positions of the matching messages, oldest first, in a new array.
  function positions(criteria) {
    const { candidates, test } = plan(criteria);
    return test === null ? candidates.slice() : candidates.filter(test);
  }

  function query(criteria) {
    const c = criteria || {};
    let found = positions(c);
    if (String(c.order || 'asc').toLowerCase() === 'desc') found.reverse();
    const offset = Number(c.offset) > 0 ? Math.floor(Number(c.offset)) : 0;
    const limit = Number(c.limit) > 0 ? Math.floor(Number(c.limit)) : Infinity;
    found = found.slice(offset, offset + limit);
    return found.map(messageAt);
  }

  function findLast(criteria) {
    const { candidates, test } = plan(criteria);
    for (let i = candidates.length - 1; i >= 0; i--) {
      if (test === null || test(candidates[i])) return messageAt(candidates[i]);
    }
    return null;
  }

  function count(criteria) {
    const { candidates, test } = plan(criteria);
    return test === null ? candidates.length : candidates.filter(test).length;
  }

  const ledger = {
    query,
    findLast,
    count,
    since: (timestamp) => query({ since: timestamp }),
  };

  // ---- cluster --------------------------------------------------------------------------------

  const agents = Array.isArray(scope.cluster.agents) ? scope.cluster.agents : [];
  const cluster = {
    id: scope.cluster.id,
    getAgents: () => agents,
    getAgentsByRole: (role) => agents.filter((a) => a && a.role === role),
    getAgent: (id) => agents.find((a) => a && a.id === id) || null,
  };

  // ---- helpers --------------------------------------------------------------------------------

  function allResponded(expected, topic, since) {
    const found = positions({ topic, since });
    const responders = new Set(found.map((p) => index.names[index.sender[p]]));
    return (expected || []).every((a) => responders.has((a && a.id) || a));
  }

  // zeroshot's (src/logic-engine.js helpers.hasConsensus): at least one response since `since`,
  // and every one has content.data.approved === true (the boolean, nothing else).
  function hasConsensus(topic, since) {
    const responses = query({ topic, since });
    if (responses.length === 0) return false;
    return responses.every((r) => {
      const data = r && r.content ? r.content.data : undefined;
      return data !== null && typeof data === 'object' && data.approved === true;
    });
  }

  function hasMessagesSince(topic, since) {
    return count({ topic, since }) > 0;
  }

  function timeSinceLastMessage(topic) {
    const last = findLast({ topic });
    return last ? Date.now() - last.timestamp : Infinity;
  }

  // zeroshot's routing table: (complexity, taskType) -> the base template and its params.
  const DEFAULT_MAX_ITERATIONS = 100;
  const MAX_TOKENS = { TRIVIAL: 50000, SIMPLE: 100000, STANDARD: 100000, CRITICAL: 150000 };
  const VALIDATOR_COUNT = { TRIVIAL: 0, SIMPLE: 1, STANDARD: 2, CRITICAL: 0 };

  function getConfig(complexity, taskType, options) {
    const autoPr = Boolean(options && options.autoPr === true);
    let base = 'full-workflow';
    if (taskType === 'DEBUG' && complexity !== 'TRIVIAL') base = 'debug-workflow';
    else if (complexity === 'TRIVIAL' && autoPr && taskType !== 'INQUIRY') base = 'worker-validator';
    else if (complexity === 'TRIVIAL') base = 'single-worker';
    else if (complexity === 'SIMPLE') base = 'worker-validator';

    const level = (role) => {
      if (complexity === 'CRITICAL' && role === 'planner') return 'level3';
      return complexity === 'TRIVIAL' ? 'level1' : 'level2';
    };
    const params = {
      task_type: taskType,
      complexity,
      max_tokens: MAX_TOKENS[complexity] ?? 100000,
      max_iterations: DEFAULT_MAX_ITERATIONS,
    };
    if (base === 'single-worker') {
      params.worker_level = level('worker');
    } else if (base === 'worker-validator') {
      params.worker_level = level('worker');
      params.validator_level = level('validator');
    } else if (base === 'debug-workflow') {
      params.investigator_level = level('planner');
      params.fixer_level = level('worker');
      params.tester_level = level('validator');
    } else {
      params.planner_level = level('planner');
      params.worker_level = level('worker');
      params.validator_level = level('validator');
      params.validator_count = VALIDATOR_COUNT[complexity] ?? 1;
    }
    return { base, params };
  }

  const helpers = {
    allResponded,
    hasConsensus,
    hasMessagesSince,
    timeSinceLastMessage,
    getConfig,
  };

  // ---- outcome --------------------------------------------------------------------------------

  // An error as text; with `stack`, the frames of the script down to where __zsRun called it.
  function describe(error, stack) {
    try {
      if (error instanceof Error) {
        const frames = stack && typeof error.stack === 'string' ? error.stack.split('\n') : [];
        const end = frames.findIndex((frame) => frame.includes('at call '));
        const own = end === -1 ? frames : frames.slice(0, end);
        return [`${error.name}: ${error.message}`, ...own].join('\n').trim();
      }
      return typeof error === 'string' ? error : stringify(error) ?? String(error);
    } catch (nested) {
      return 'a value that cannot be shown';
    }
  }

  function kindOf(value) {
    if (value === null) return 'null';
    return Array.isArray(value) ? 'array' : typeof value;
  }

  // `trigger` reports truthiness and a stop reason; `value` reports the whole JSON value.
  function run(body, mode) {
    let value;
    try {
      value = body.call(undefined);
    } catch (error) {
      return stringify({ thrown: describe(error, true) });
    }
    const kind = kindOf(value);
    if (mode === 'trigger') {
      const reason = kind === 'object' && typeof value.reason === 'string' ? value.reason : null;
      return stringify({ truthy: Boolean(value), reason });
    }
    if (kind !== 'object' && kind !== 'array') return stringify({ kind });
    try {
      return stringify({ kind, value });
    } catch (error) {
      return stringify({ kind, unserializable: describe(error, false) });
    }
  }

  const message = scope.message;
  const values = {
    message,
    triggeringMessage: message,
    result: scope.result,
    agent: scope.agent,
    ledger,
    cluster,
    helpers,
    console: { log() {}, info() {}, warn() {}, error() {}, debug() {} },
    __zsRun: run,
  };
  for (const [name, value] of Object.entries(values)) {
    Object.defineProperty(global, name, { value, writable: true, configurable: true });
  }
})(globalThis);
