// Replays through the official SDK (client.browsers.replays.*) on real headful browsers: a
// recording across page colour changes is downloaded and checked with ffprobe (H.264, duration,
// index first) and a frame extracted with ffmpeg shows a page colour; Range requests; the maximum
// duration; a still page sent a few frames a second; session end finishing a recording that stays
// downloadable after the session is gone; overlapping recordings; the view page; bad input.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, ConflictError, NotFoundError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';
import { PNG } from 'pngjs';

import { descendants, rejectsWith, startServer, stillAlive, waitFor } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

const VIEWPORT = { width: 800, height: 600 };
const COLOURS = { red: [255, 0, 0], green: [0, 200, 0], blue: [0, 0, 255] };

let server;
let client;
let work;

before(async () => {
  server = await startServer();
  client = server.client;
  work = mkdtempSync(join(tmpdir(), 'hangar-replays-'));
});

after(async () => {
  await server?.stop();
  rmSync(work, { recursive: true, force: true });
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function headful() {
  const session = await client.browsers.create({ headless: false, viewport: VIEWPORT, kiosk_mode: true });
  const cdp = await chromium.connectOverCDP(session.cdp_ws_url, { timeout: 30_000 });
  const page = cdp.contexts()[0].pages()[0];
  const paint = (c) => page.evaluate((rgb) => (document.body.style.background = `rgb(${rgb})`), COLOURS[c].join(','));
  await page.setContent('<html><body style="margin:0;height:100vh"></body></html>');
  return {
    session,
    id: session.session_id,
    page,
    paint,
    async close() {
      await cdp.close().catch(() => {});
      await client.browsers.deleteByID(session.session_id).catch(() => {});
    },
  };
}

async function downloadTo(id, rid, name) {
  const res = await client.browsers.replays.download(rid, { id });
  assert.equal(res.headers.get('content-type'), 'video/mp4');
  const bytes = Buffer.from(await res.arrayBuffer());
  const file = join(work, name);
  writeFileSync(file, bytes);
  return { file, bytes };
}

function probe(file) {
  const out = JSON.parse(
    execFileSync('ffprobe', ['-v', 'error', '-print_format', 'json', '-show_format', '-show_streams', file]).toString(),
  );
  const video = out.streams[0];
  const frames = Number(video.nb_frames);
  return { duration: Number(out.format.duration), codec: video.codec_name, width: video.width, frames };
}

function frameAt(file, seconds) {
  const png = join(work, `frame-${Date.now()}.png`);
  execFileSync('ffmpeg', ['-v', 'error', '-ss', String(seconds), '-i', file, '-frames:v', '1', '-y', png]);
  return PNG.sync.read(readFileSync(png));
}

/** The colour a quarter into the frame at `seconds` (the pointer rests in the middle). */
function frameColour(file, seconds) {
  const img = frameAt(file, seconds);
  const i = (img.width * (img.height >> 2) + (img.width >> 2)) * 4;
  return [img.data[i], img.data[i + 1], img.data[i + 2]];
}

/** The darkest pixel (sum of R, G, B) in the 16x24 box right below (x, y) of the frame at `seconds`. */
function darkestBelow(file, seconds, x, y) {
  const img = frameAt(file, seconds);
  let darkest = 765;
  for (let dy = 0; dy < 24; dy++)
    for (let dx = 0; dx < 16; dx++) {
      const i = (img.width * (y + dy) + x + dx) * 4;
      darkest = Math.min(darkest, img.data[i] + img.data[i + 1] + img.data[i + 2]);
    }
  return darkest;
}

const near = (a, b) => a.every((v, i) => Math.abs(v - b[i]) <= 40);

describe('replays', () => {
  let b;
  before(async () => {
    b = await headful();
  });
  after(async () => {
    await b?.close();
  });

  test('a recording across page changes is a playable, seekable H.264 MP4 of what happened', async () => {
    await b.paint('red');
    // The video begins when the start was asked for; the answer comes once ffmpeg takes frames.
    const asked = Date.now();
    const replay = await client.browsers.replays.start(b.id, { framerate: 10 });
    assert.match(replay.replay_id, /^[a-z0-9]{24}$/);
    assert.ok(replay.started_at);
    assert.equal(replay.finished_at, null);
    assert.match(replay.replay_view_url, /\/replays\/view\//);

    // While it records: listed unfinished, and not downloadable yet.
    const listed = await client.browsers.replays.list(b.id);
    assert.deepEqual(
      listed.map((r) => [r.replay_id, r.finished_at]),
      [[replay.replay_id, null]],
    );
    await rejectsWith(client.browsers.replays.download(replay.replay_id, { id: b.id }), ConflictError, 'conflict');

    await sleep(1200);
    await b.paint('green');
    const green = (Date.now() - asked) / 1000;
    await sleep(1200);
    const blue = (Date.now() - asked) / 1000;
    await b.paint('blue');
    await sleep(1200);
    await client.browsers.replays.stop(replay.replay_id, { id: b.id });

    const [done] = await client.browsers.replays.list(b.id);
    assert.ok(done.finished_at, 'finished_at is set once stopped');
    const seconds = (Date.parse(done.finished_at) - Date.parse(done.started_at)) / 1000;
    assert.ok(seconds > 3 && seconds < 8, `recorded for ${seconds} s`);

    const { file, bytes } = await downloadTo(b.id, replay.replay_id, 'changes.mp4');
    const info = probe(file);
    assert.equal(info.codec, 'h264');
    assert.equal(info.width, VIEWPORT.width);
    assert.ok(info.duration > 2.5 && info.duration < 8, `duration ${info.duration}`);
    // Fast start: the index (moov) comes before the media (mdat).
    assert.ok(bytes.indexOf('moov') > 0 && bytes.indexOf('moov') < bytes.indexOf('mdat'), 'moov before mdat');

    const first = frameColour(file, 0.3);
    const middle = frameColour(file, (green + blue) / 2);
    const last = frameColour(file, Math.max(0, info.duration - 0.3));
    assert.ok(near(first, COLOURS.red), `first frame ${first}`);
    assert.ok(near(middle, COLOURS.green), `frame at ${(green + blue) / 2} s ${middle}`);
    assert.ok(near(last, COLOURS.blue), `last frame ${last}`);

    // Stopping again is fine.
    await client.browsers.replays.stop(replay.replay_id, { id: b.id });
  });

  test('the pointer is drawn in, and its moves over a still page are recorded', slow, async () => {
    await b.page.evaluate(() => (document.body.style.background = '#fff'));
    await client.browsers.computer.moveMouse(b.id, { x: 200, y: 150 });
    const replay = await client.browsers.replays.start(b.id, { framerate: 10 });
    await sleep(1500);
    await client.browsers.computer.moveMouse(b.id, { x: 500, y: 400 });
    await sleep(1500);
    await client.browsers.replays.stop(replay.replay_id, { id: b.id });
    const { file } = await downloadTo(b.id, replay.replay_id, 'pointer.mp4');
    const end = probe(file).duration - 0.3;
    // The arrow's outline is dark on the white page, where it is and nowhere else.
    assert.ok(darkestBelow(file, 0.5, 200, 150) < 300, 'the pointer at its first place');
    assert.ok(darkestBelow(file, 0.5, 500, 400) > 600, 'nothing where it went later');
    assert.ok(darkestBelow(file, end, 500, 400) < 300, 'the pointer where it moved');
    assert.ok(darkestBelow(file, end, 200, 150) > 600, 'nothing where it was');
  });

  test('downloads honour Range requests', async () => {
    const [replay] = await client.browsers.replays.list(b.id);
    const url = `${server.baseURL}/browsers/${b.id}/replays/${replay.replay_id}`;
    const auth = { authorization: `Bearer ${server.apiKey}` };
    const whole = Buffer.from(await (await fetch(url, { headers: auth })).arrayBuffer());
    const part = await fetch(url, { headers: { ...auth, range: 'bytes=100-199' } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get('content-range'), `bytes 100-199/${whole.length}`);
    assert.deepEqual(Buffer.from(await part.arrayBuffer()), whole.subarray(100, 200));
    const tail = await fetch(url, { headers: { ...auth, range: 'bytes=-10' } });
    assert.equal(tail.status, 206);
    assert.deepEqual(Buffer.from(await tail.arrayBuffer()), whole.subarray(whole.length - 10));
    const beyond = await fetch(url, { headers: { ...auth, range: `bytes=${whole.length + 10}-` } });
    assert.equal(beyond.status, 416);
  });

  test('the view page plays the replay without an API key', async () => {
    const [replay] = await client.browsers.replays.list(b.id);
    const page = await fetch(replay.replay_view_url);
    assert.equal(page.status, 200);
    const html = await page.text();
    const src = /<video[^>]* src="([^"]+)"/.exec(html)?.[1];
    assert.ok(src, 'the page has a video');
    const video = await fetch(new URL(src, replay.replay_view_url));
    assert.equal(video.status, 200);
    assert.equal(video.headers.get('content-type'), 'video/mp4');
    assert.ok((await video.arrayBuffer()).byteLength > 1000);
    const forged = await fetch(replay.replay_view_url.replace(/[^/]{6}$/, 'AAAAAA'));
    assert.equal(forged.status, 401);
  });

  test('a still page is sent a few frames a second, and its video lasts until the stop', slow, async () => {
    await b.paint('red');
    const replay = await client.browsers.replays.start(b.id, { framerate: 25 });
    const [ffmpeg] = descendants(server.pid).filter((p) => /\bffmpeg\b.*libx264/.test(p.cmd));
    const readSoFar = () => Number(/^rchar: (\d+)$/m.exec(readFileSync(`/proc/${ffmpeg.pid}/io`, 'utf8'))[1]);
    const readAtStart = readSoFar();
    await sleep(3000);
    // What ffmpeg read from the feed while the page stood still: a frame per slot (25 a second,
    // 720 kB each) would be 54 MB.
    const piped = readSoFar() - readAtStart;
    const frameBytes = (VIEWPORT.width * VIEWPORT.height * 3) / 2;
    assert.ok(piped < 6 * 3 * frameBytes, `ffmpeg read ${piped} bytes in 3 s of a still page`);
    await client.browsers.replays.stop(replay.replay_id, { id: b.id });
    const done = (await client.browsers.replays.list(b.id)).find((r) => r.replay_id === replay.replay_id);
    const seconds = (Date.parse(done.finished_at) - Date.parse(done.started_at)) / 1000;
    const { file } = await downloadTo(b.id, replay.replay_id, 'still.mp4');
    const { duration, frames } = probe(file);
    // 25 a second were asked for; the feed sends a still screen 4 times a second (and the last
    // frame again at the stop): ffmpeg encodes those, not 75 copies.
    assert.ok(frames >= 3 * seconds - 2 && frames <= 5 * seconds + 3, `${frames} frames in ${seconds} s`);
    assert.ok(Math.abs(duration - seconds) < 0.6, `the video lasts ${duration} s, the recording ${seconds} s`);
    assert.ok(near(frameColour(file, duration - 0.1), COLOURS.red), 'the still page to the end');
  });

  test('a recording stops by itself at its maximum duration', slow, async () => {
    const replay = await client.browsers.replays.start(b.id, { framerate: 5, max_duration_in_seconds: 2 });
    await waitFor(
      async () => (await client.browsers.replays.list(b.id)).find((r) => r.replay_id === replay.replay_id).finished_at,
      { timeoutMs: 15_000, what: 'the replay to finish by itself' },
    );
    const { file } = await downloadTo(b.id, replay.replay_id, 'max.mp4');
    const { duration } = probe(file);
    assert.ok(duration > 1.5 && duration < 2.6, `duration ${duration}`);
  });

  test('recordings may overlap', slow, async () => {
    const one = await client.browsers.replays.start(b.id, { framerate: 5 });
    await sleep(500);
    const two = await client.browsers.replays.start(b.id, { framerate: 5 });
    await sleep(1000);
    await client.browsers.replays.stop(two.replay_id, { id: b.id });
    await sleep(500);
    await client.browsers.replays.stop(one.replay_id, { id: b.id });
    const d1 = probe((await downloadTo(b.id, one.replay_id, 'one.mp4')).file).duration;
    const d2 = probe((await downloadTo(b.id, two.replay_id, 'two.mp4')).file).duration;
    assert.ok(d1 > d2, `the longer one is longer (${d1} vs ${d2})`);
  });

  test('a resize waits for the recording unless forced, which splits it into a new replay at the new size', async () => {
    const replay = await client.browsers.replays.start(b.id, { framerate: 5 });
    await sleep(1000);
    await rejectsWith(
      client.browsers.update(b.id, { viewport: { width: 1024, height: 768 } }),
      ConflictError,
      'conflict',
    );
    const resized = await client.browsers.update(b.id, { viewport: { width: 1024, height: 768, force: true } });
    assert.equal(resized.viewport.width, 1024);
    const all = await client.browsers.replays.list(b.id);
    const done = all.find((r) => r.replay_id === replay.replay_id);
    assert.ok(done.finished_at, 'the forced resize finished the first segment');
    const { file } = await downloadTo(b.id, replay.replay_id, 'resized.mp4');
    assert.equal(probe(file).width, VIEWPORT.width);
    // The recording goes on as a new replay, on the resized screen.
    const next = all.find((r) => r.replay_id !== replay.replay_id && !r.finished_at);
    assert.ok(next, `a new segment records: ${JSON.stringify(all)}`);
    await sleep(1000);
    await client.browsers.replays.stop(next.replay_id, { id: b.id });
    assert.equal(probe((await downloadTo(b.id, next.replay_id, 'segment-2.mp4')).file).width, 1024);
  });

  test('a file the sandbox swaps in for a recording is never served from the host', async () => {
    const replay = await client.browsers.replays.start(b.id, { framerate: 5 });
    await sleep(500);
    // Code in the browser's sandbox may write its recordings folder: a symlink to a host file
    // in place of the recording must not be followed when the server keeps and serves it.
    const swap = await client.browsers.process.exec(b.id, {
      command: 'ln',
      args: ['-sf', '/etc/hostname', `/run/hangar/recordings/${replay.replay_id}.part.mp4`],
    });
    assert.equal(swap.exit_code, 0);
    await client.browsers.replays.stop(replay.replay_id, { id: b.id });
    await rejectsWith(client.browsers.replays.download(replay.replay_id, { id: b.id }), NotFoundError, 'not_found');
  });

  test('bad input gets a 400 or 404', async () => {
    await rejectsWith(client.browsers.replays.start(b.id, { framerate: 0 }), BadRequestError, 'bad_request');
    await rejectsWith(client.browsers.replays.start(b.id, { framerate: 1000 }), BadRequestError, 'bad_request');
    await rejectsWith(
      client.browsers.replays.start(b.id, { max_duration_in_seconds: -5 }),
      BadRequestError,
      'bad_request',
    );
    await rejectsWith(client.browsers.replays.start(b.id, { record_audio: 'yes' }), BadRequestError, 'bad_request');
    await rejectsWith(client.browsers.replays.stop('nosuchreplay', { id: b.id }), NotFoundError, 'not_found');
    await rejectsWith(client.browsers.replays.download('nosuchreplay', { id: b.id }), NotFoundError, 'not_found');
    await rejectsWith(client.browsers.replays.list('nosuchsession'), NotFoundError, 'not_found');
  });
});

describe('replays and the session lifecycle', () => {
  test('headless sessions cannot record', async () => {
    const s = await client.browsers.create({ headless: true });
    try {
      const err = await rejectsWith(client.browsers.replays.start(s.session_id), BadRequestError, 'bad_request');
      assert.match(err.message, /headful/);
    } finally {
      await client.browsers.deleteByID(s.session_id);
    }
  });

  test('deleting the session finishes a running recording, which stays downloadable', async () => {
    const b = await headful();
    let replay;
    try {
      await b.paint('green');
      replay = await client.browsers.replays.start(b.id, { framerate: 10 });
      await sleep(1500);
    } finally {
      await b.close(); // deletes the session while it records
    }
    const [after] = await client.browsers.replays.list(b.id);
    assert.equal(after.replay_id, replay.replay_id);
    assert.ok(after.finished_at, 'finished by the session end');
    const { file } = await downloadTo(b.id, replay.replay_id, 'ended.mp4');
    assert.ok(probe(file).duration > 1);
    assert.ok(near(frameColour(file, 0.5), COLOURS.green));
    await rejectsWith(client.browsers.replays.start(b.id), NotFoundError, 'not_found');
  });
});

test('stopping the server finishes running recordings; the next start lists and serves them', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-replays-data-'));
  const apiKey = `sk_test_replays_${Date.now()}`;
  try {
    const first = await startServer({ dataDir, apiKey });
    let s, replay, ffmpeg;
    try {
      s = await first.client.browsers.create({ headless: false, viewport: VIEWPORT });
      replay = await first.client.browsers.replays.start(s.session_id, { framerate: 10 });
      ffmpeg = descendants(first.pid).filter((p) => /\bffmpeg\b.*libx264/.test(p.cmd));
      assert.equal(ffmpeg.length, 1, 'one ffmpeg, in the instance');
      await sleep(2000);
    } catch (e) {
      await first.stop();
      throw e;
    }
    const stopped = await first.stop();
    assert.equal(stopped.killed, false, 'the server stopped within its grace period');
    assert.deepEqual(stillAlive(ffmpeg), [], 'ffmpeg ended with the server');

    const second = await startServer({ dataDir, apiKey });
    try {
      const [r] = await second.client.browsers.replays.list(s.session_id);
      assert.equal(r.replay_id, replay.replay_id);
      assert.ok(r.finished_at, 'finished when the server stopped');
      const res = await second.client.browsers.replays.download(replay.replay_id, { id: s.session_id });
      const bytes = Buffer.from(await res.arrayBuffer());
      const file = join(work, 'after-restart.mp4');
      writeFileSync(file, bytes);
      const info = probe(file);
      assert.equal(info.codec, 'h264');
      assert.ok(info.duration > 1.5, `${info.duration} s`);
      assert.ok(bytes.indexOf('moov') > 0 && bytes.indexOf('moov') < bytes.indexOf('mdat'), 'a finished file');
    } finally {
      await second.stop();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
