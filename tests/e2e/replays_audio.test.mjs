// Replays with audio, through the official SDK: a headful page plays a tone (WebAudio, started by
// a real click), a replay with record_audio is downloaded and ffprobe finds an AAC stream whose
// samples are loud; a replay without it has no audio stream; headless answers 400 naming audio.
// Each headful instance has its own PulseAudio, its socket in its own instance folder.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { BadRequestError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { descendants, rejectsWith, startServer, waitFor } from './lib/server.mjs';

const VIEWPORT = { width: 800, height: 600 };
// The first click starts a silent 440 Hz oscillator (audio needs a user gesture); the second turns
// it up to half scale and the page from black to white in the same task, so sound and picture
// change at one moment.
const TONE_PAGE = `<html><body style="margin:0;height:100vh;background:#000">
<button id="play" style="width:100%;height:100%;opacity:0">play</button>
<script>
let gain;
document.getElementById('play').addEventListener('click', () => {
  if (gain) {
    gain.gain.value = 0.5;
    document.body.style.background = '#fff';
    return;
  }
  const ctx = new AudioContext();
  const osc = ctx.createOscillator();
  gain = ctx.createGain();
  osc.frequency.value = 440;
  gain.gain.value = 0;
  osc.connect(gain).connect(ctx.destination);
  osc.start();
  document.body.dataset.playing = ctx.state;
  ctx.onstatechange = () => (document.body.dataset.playing = ctx.state);
});
</script></body></html>`;

let server;
let client;
let work;

before(async () => {
  server = await startServer();
  client = server.client;
  work = mkdtempSync(join(tmpdir(), 'hangar-replays-audio-'));
});

after(async () => {
  await server?.stop();
  rmSync(work, { recursive: true, force: true });
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function download(id, rid, name) {
  const res = await client.browsers.replays.download(rid, { id });
  const file = join(work, name);
  writeFileSync(file, Buffer.from(await res.arrayBuffer()));
  return file;
}

function streams(file) {
  const out = execFileSync('ffprobe', ['-v', 'error', '-print_format', 'json', '-show_streams', file]).toString();
  return JSON.parse(out).streams;
}

/** ffmpeg's volumedetect over the first audio stream: {max, mean} in dB. */
function loudness(file) {
  const args = ['-hide_banner', '-nostats', '-i', file, '-map', '0:a:0', '-af', 'volumedetect', '-f', 'null', '-'];
  const r = spawnSync('ffmpeg', args);
  const text = r.stderr.toString();
  const num = (what) => Number((text.match(new RegExp(`${what}_volume: (-?[\\d.]+|-inf) dB`)) || [])[1]);
  return { max: num('max'), mean: num('mean') };
}

/** When the picture first turns white and when the sound first rises above -40 dB, in seconds. */
function whiteAndSound(file) {
  const frames = execFileSync('ffprobe', [
    '-v', 'error', '-f', 'lavfi', `movie=${file},signalstats`,
    '-show_entries', 'frame=pts_time:frame_tags=lavfi.signalstats.YAVG', '-of', 'csv=p=0',
  ]).toString().trim().split('\n').map((l) => l.split(',').map(Number));
  const white = frames.find(([, y]) => y > 128)?.[0];
  const args = ['-v', 'error', '-i', file, '-map', '0:a:0', '-af', 'silencedetect=n=-40dB:d=0.05,ametadata=print:file=-'];
  const detected = spawnSync('ffmpeg', [...args, '-f', 'null', '-']).stdout.toString();
  const sound = Number((detected.match(/silence_end=([\d.]+)/) || [])[1]);
  return { white, sound };
}

function pulseDaemons() {
  return descendants(server.pid).filter((p) => /\bpulseaudio\b/.test(p.cmd) && !/\bbwrap\b/.test(p.cmd));
}

test('a replay with record_audio has an AAC track with the tone the page played; without it, none', async () => {
  const session = await client.browsers.create({ headless: false, viewport: VIEWPORT, kiosk_mode: true });
  const cdp = await chromium.connectOverCDP(session.cdp_ws_url, { timeout: 30_000 });
  try {
    const page = cdp.contexts()[0].pages()[0];
    await page.setContent(TONE_PAGE);
    await page.click('#play');
    await page.waitForFunction(() => document.body.dataset.playing === 'running', null, { timeout: 10_000 });

    // The instance's own sink, its socket inside the instance folder (/run/hangar in the sandbox).
    const daemons = pulseDaemons();
    assert.equal(daemons.length, 1, 'one PulseAudio for the one headful browser');
    assert.match(daemons[0].cmd, /socket=\/run\/hangar\/pulse\/native/);

    const silent = await client.browsers.replays.start(session.session_id, { framerate: 10 });
    const loud = await client.browsers.replays.start(session.session_id, { framerate: 10, record_audio: true });
    await sleep(1500);
    await page.click('#play');
    await sleep(3000);
    await client.browsers.replays.stop(loud.replay_id, { id: session.session_id });
    await client.browsers.replays.stop(silent.replay_id, { id: session.session_id });

    const withAudio = await download(session.session_id, loud.replay_id, 'audio.mp4');
    const s = streams(withAudio);
    const audio = s.filter((x) => x.codec_type === 'audio');
    assert.equal(audio.length, 1, 'one audio stream');
    assert.equal(audio[0].codec_name, 'aac');
    assert.equal(Number(audio[0].sample_rate), 48000);
    assert.ok(s.some((x) => x.codec_type === 'video' && x.codec_name === 'h264'), 'the video is there too');
    const { max, mean } = loudness(withAudio);
    // A 0.5-gain sine peaks near -6 dB; silence would be -91 dB or -inf.
    assert.ok(max > -30, `the tone is in the file (max_volume ${max} dB, mean ${mean} dB)`);
    const duration = Number(audio[0].duration);
    assert.ok(duration > 3 && duration < 8, `the audio lasts as long as the recording (${duration} s)`);
    // In step: the tone starts when the page turns white (both ≈ 1.5 s in). Starting both inputs
    // at zero put the sound 0.5-2 s late; on the wall clock they are tens of ms apart.
    const { white, sound } = whiteAndSound(withAudio);
    assert.ok(white > 0.5 && sound > 0.5, `the change is not at the start (white ${white} s, sound ${sound} s)`);
    assert.ok(Math.abs(sound - white) < 0.35, `picture and sound in step: white at ${white} s, sound at ${sound} s`);

    const withoutAudio = await download(session.session_id, silent.replay_id, 'silent.mp4');
    assert.deepEqual(
      streams(withoutAudio).map((x) => x.codec_type),
      ['video'],
      'a replay without record_audio has no audio stream',
    );
  } finally {
    await cdp.close().catch(() => {});
    await client.browsers.deleteByID(session.session_id).catch(() => {});
  }
  // A DELETE answers before its teardown ends; the sink goes with it.
  await waitFor(() => pulseDaemons().length === 0, { timeoutMs: 15_000, what: 'the sink to end with its browser' });
});

test('headless: record_audio is a 400 naming the missing audio output, and no sink is started', async () => {
  const session = await client.browsers.create({ headless: true });
  try {
    assert.deepEqual(pulseDaemons(), [], 'headless browsers have no audio sink');
    const err = await rejectsWith(
      client.browsers.replays.start(session.session_id, { record_audio: true }),
      BadRequestError,
      'bad_request',
    );
    assert.match(JSON.stringify(err.error), /record_audio: headless browsers have no audio output/);
  } finally {
    await client.browsers.deleteByID(session.session_id).catch(() => {});
  }
});
