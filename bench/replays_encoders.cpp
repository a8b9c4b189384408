// bench/replays_encoders: what encoding a full-motion 1080p screen costs, three ways (issue 23
// point 6). 250 synthetic frames of `bench/replays.mjs`'s animated page (a background whose hue
// changes every frame, a moving dark box), made before timing, encoded by
//   ffmpeg   the recorder's own encoder: the frames piped (vmsplice) into ffmpeg with the
//            recorder's x264 settings (ultrafast/zerolatency, qp 26, one thread, keyframe every
//            50) and malloc settings, writing MP4 to /dev/null; ffmpeg's CPU;
//   x264     libx264 linked in, the same settings, frames from memory; the process's CPU;
//   openh264 Cisco's OpenH264 linked in, its fastest single-thread real-time settings at a
//            fixed QP of 26; the process's CPU.
// Prints core at 25 frames a second and the size of the stream. Not part of `make bench` (no
// server involved; the two libraries' development packages are not in `make setup`):
//   apt-get install libx264-dev libopenh264-dev
//   g++ -O2 -std=c++20 -o /tmp/replays_encoders bench/replays_encoders.cpp -lx264 -lopenh264
//   for i in 1 2 3; do /tmp/replays_encoders; done
// x264.h and OpenH264's headers declare the same NAL enumerators, so each is reached through a
// namespace of its own.
#include "ffmpeg_pipe.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace x264 {
extern "C" {
#include <x264.h>
}
} // namespace x264
namespace openh264 {
#include <wels/codec_api.h>
} // namespace openh264

namespace {

constexpr int kWidth = 1920, kHeight = 1080, kFrames = 250, kFps = 25, kQp = 26;
constexpr std::size_t kLuma = std::size_t{kWidth} * kHeight, kFrameSize = kLuma * 3 / 2;

struct Result {
    double cpu_seconds;
    std::size_t bytes;
};

double own_cpu() {
    rusage r{};
    ::getrusage(RUSAGE_SELF, &r);
    return bench::seconds(r);
}

// hsl(hue, 60%, 60%) as BT.601 limited-range Y, U, V: what the page's background becomes.
std::array<std::uint8_t, 3> background(int hue) {
    constexpr double s = 0.6, l = 0.6;
    auto channel = [&](double n) {
        const double k = std::fmod(n + hue / 30.0, 12.0);
        return 255 * (l - s * std::min(l, 1 - l) * std::max(-1.0, std::min({k - 3, 9 - k, 1.0})));
    };
    const double r = channel(0), g = channel(8), b = channel(4);
    return {static_cast<std::uint8_t>((66 * r + 129 * g + 25 * b + 128) / 256 + 16),
            static_cast<std::uint8_t>((-38 * r - 74 * g + 112 * b + 128) / 256 + 128),
            static_cast<std::uint8_t>((112 * r - 94 * g - 18 * b + 128) / 256 + 128)};
}

std::vector<std::vector<std::uint8_t>> animated_frames() {
    std::vector<std::vector<std::uint8_t>> frames;
    for (int n = 0; n < kFrames; ++n) {
        std::vector<std::uint8_t> f(kFrameSize);
        const auto [y, u, v] = background(n % 360);
        std::memset(f.data(), y, kLuma);
        std::memset(f.data() + kLuma, u, kLuma / 4);
        std::memset(f.data() + kLuma * 5 / 4, v, kLuma / 4);
        const int left = (n * 7) % 1700, top = (n * 3) % 860; // the page's #box, 200 px of #222
        for (int row = top; row < top + 200; ++row)
            std::memset(f.data() + std::size_t{static_cast<unsigned>(row)} * kWidth + left, 0x2F, 200);
        for (int row = top / 2; row < (top + 200) / 2; ++row) {
            const std::size_t at = std::size_t{static_cast<unsigned>(row)} * kWidth / 2 + left / 2;
            std::memset(f.data() + kLuma + at, 128, 100);
            std::memset(f.data() + kLuma * 5 / 4 + at, 128, 100);
        }
        frames.push_back(std::move(f));
    }
    return frames;
}

Result through_ffmpeg(const std::vector<std::vector<std::uint8_t>> &frames) {
    bench::FfmpegOnPipe ffmpeg(
        {"ffmpeg",    "-v",         "error",       "-f",  "rawvideo", "-pix_fmt", "yuv420p", "-video_size",
         "1920x1080", "-framerate", "25",          "-i",  "pipe:0",   "-c:v",     "libx264", "-preset",
         "ultrafast", "-tune",      "zerolatency", "-qp", "26",       "-g",       "50",      "-threads",
         "1",         "-f",         "mp4",         "-y",  "/dev/null"},
        "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864");
    for (const auto &f : frames)
        if (!ffmpeg.write(f.data(), f.size(), true)) return {};
    return {ffmpeg.finish(), 0};
}

Result with_x264(const std::vector<std::vector<std::uint8_t>> &frames) {
    x264::x264_param_t p;
    x264::x264_param_default_preset(&p, "ultrafast", "zerolatency");
    p.i_width = kWidth;
    p.i_height = kHeight;
    p.i_csp = X264_CSP_I420;
    p.i_threads = 1;
    p.i_fps_num = kFps;
    p.i_fps_den = 1;
    p.i_keyint_max = 2 * kFps;
    p.rc.i_rc_method = X264_RC_CQP;
    p.rc.i_qp_constant = kQp;
    p.i_log_level = X264_LOG_NONE;
    x264::x264_t *encoder = x264::x264_encoder_open(&p);
    x264::x264_picture_t in, out;
    x264::x264_picture_init(&in);
    in.img.i_csp = X264_CSP_I420;
    in.img.i_plane = 3;
    in.img.i_stride[0] = kWidth;
    in.img.i_stride[1] = in.img.i_stride[2] = kWidth / 2;
    Result r{own_cpu(), 0};
    for (int n = 0; n < kFrames; ++n) {
        auto *f = const_cast<std::uint8_t *>(frames[static_cast<std::size_t>(n)].data());
        in.img.plane[0] = f;
        in.img.plane[1] = f + kLuma;
        in.img.plane[2] = f + kLuma * 5 / 4;
        in.i_pts = n;
        x264::x264_nal_t *nals = nullptr;
        int count = 0;
        const int size = x264::x264_encoder_encode(encoder, &nals, &count, &in, &out);
        if (size > 0) r.bytes += static_cast<std::size_t>(size);
    }
    r.cpu_seconds = own_cpu() - r.cpu_seconds;
    x264::x264_encoder_close(encoder);
    return r;
}

Result with_openh264(const std::vector<std::vector<std::uint8_t>> &frames) {
    using namespace openh264;
    ISVCEncoder *encoder = nullptr;
    WelsCreateSVCEncoder(&encoder);
    SEncParamExt p;
    encoder->GetDefaultParams(&p);
    p.iUsageType = CAMERA_VIDEO_REAL_TIME; // faster here than SCREEN_CONTENT_REAL_TIME (0.30 core)
    p.iComplexityMode = LOW_COMPLEXITY;
    p.iPicWidth = kWidth;
    p.iPicHeight = kHeight;
    p.fMaxFrameRate = kFps;
    p.iRCMode = RC_OFF_MODE;
    p.iMinQp = p.iMaxQp = kQp;
    p.iMultipleThreadIdc = 1;
    p.uiIntraPeriod = 2 * kFps;
    p.iNumRefFrame = 1;
    p.bEnableFrameSkip = p.bEnableSceneChangeDetect = p.bEnableBackgroundDetection = p.bEnableAdaptiveQuant =
        p.bEnableDenoise = p.bEnableLongTermReference = false;
    p.sSpatialLayers[0].iVideoWidth = kWidth;
    p.sSpatialLayers[0].iVideoHeight = kHeight;
    p.sSpatialLayers[0].fFrameRate = kFps;
    p.sSpatialLayers[0].sSliceArgument.uiSliceMode = SM_SINGLE_SLICE;
    if (encoder->InitializeExt(&p) != 0) return {};
    int quiet = WELS_LOG_QUIET;
    encoder->SetOption(ENCODER_OPTION_TRACE_LEVEL, &quiet);
    SSourcePicture in{};
    in.iColorFormat = videoFormatI420;
    in.iPicWidth = kWidth;
    in.iPicHeight = kHeight;
    in.iStride[0] = kWidth;
    in.iStride[1] = in.iStride[2] = kWidth / 2;
    Result r{own_cpu(), 0};
    for (int n = 0; n < kFrames; ++n) {
        auto *f = const_cast<std::uint8_t *>(frames[static_cast<std::size_t>(n)].data());
        in.pData[0] = f;
        in.pData[1] = f + kLuma;
        in.pData[2] = f + kLuma * 5 / 4;
        in.uiTimeStamp = n * 1000 / kFps;
        SFrameBSInfo info{};
        encoder->EncodeFrame(&in, &info);
        for (int layer = 0; layer < info.iLayerNum; ++layer)
            for (int nal = 0; nal < info.sLayerInfo[layer].iNalCount; ++nal)
                r.bytes += static_cast<std::size_t>(info.sLayerInfo[layer].pNalLengthInByte[nal]);
    }
    r.cpu_seconds = own_cpu() - r.cpu_seconds;
    encoder->Uninitialize();
    WelsDestroySVCEncoder(encoder);
    return r;
}

void print(const char *name, const Result &r) {
    std::printf("%-9s %.3f core", name, r.cpu_seconds * kFps / kFrames);
    if (r.bytes > 0) std::printf("  %zu kB", r.bytes / 1024);
    std::printf("\n");
}

} // namespace

int main() {
    const auto frames = animated_frames();
    print("ffmpeg", through_ffmpeg(frames));
    print("x264", with_x264(frames));
    print("openh264", with_openh264(frames));
}
