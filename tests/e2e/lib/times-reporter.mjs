// A node:test reporter that writes each test file's wall time, slowest first, for
// build/test-times.txt (`make test-e2e` runs it beside the TAP reporter). Files run one at a time
// (--test-concurrency=1), so a file's time is from its first event to the next file's first event
// (or the end of the run): its hooks and start-up included.
export default async function* timesReporter(source) {
  const spans = new Map(); // file -> ms
  let current = null;
  let since = Date.now();
  const started = since;
  const close = (now) => {
    if (current) spans.set(current, (spans.get(current) ?? 0) + (now - since));
  };
  const failed = new Set();
  for await (const event of source) {
    const file = event.data?.file;
    if (file && file !== current) {
      const now = Date.now();
      close(now);
      current = file;
      since = now;
    }
    // A todo test that fails (a known gap it shows) does not fail its file, as node --test counts it.
    if (event.type === 'test:fail' && file && !event.data.todo) failed.add(file);
  }
  const end = Date.now();
  close(end);
  const rows = [...spans].sort((a, b) => b[1] - a[1]);
  yield `# e2e file times (s), ${new Date(started).toISOString()}, total ${((end - started) / 1000).toFixed(1)}\n`;
  for (const [file, ms] of rows)
    yield `${(ms / 1000).toFixed(1).padStart(7)}  ${file.split('/').pop()}${failed.has(file) ? '  (failed)' : ''}\n`;
}
