// bench/replays_pipe: what handing 1080p I420 frames to ffmpeg costs, write() against vmsplice()
// with two buffers used by turns (how the replays plugin's ScreenFeed does it). 500 frames, each
// changed, into `ffmpeg -f rawvideo -i pipe:0 -f null -` through a 1 MB pipe; prints the CPU
// (utime+stime) of the writer and of ffmpeg as cores at 25 frames a second. Not part of
// `make bench` (no server involved):
//   g++ -O2 -o /tmp/replays_pipe bench/replays_pipe.cpp && /tmp/replays_pipe write && /tmp/replays_pipe splice
#include "ffmpeg_pipe.hpp"

#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char **argv) {
    const bool splice = argc > 1 && std::strcmp(argv[1], "splice") == 0;
    constexpr int frames = 500;
    constexpr std::size_t frame_size = 1920 * 1080 * 3 / 2;
    bench::FfmpegOnPipe ffmpeg({"ffmpeg", "-v", "error", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-video_size",
                                "1920x1080", "-i", "pipe:0", "-f", "null", "-"});
    std::vector<unsigned char> buffers(2 * frame_size);
    for (std::size_t i = 0; i < buffers.size(); ++i)
        buffers[i] = static_cast<unsigned char>(i * 7);
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    for (int f = 0; f < frames; ++f) {
        unsigned char *data = buffers.data() + (splice ? static_cast<std::size_t>(f % 2) * frame_size : 0);
        data[static_cast<std::size_t>(f) % frame_size] ^= 1; // a changed frame
        if (!ffmpeg.write(data, frame_size, splice)) return 2;
    }
    const double ffmpeg_seconds = ffmpeg.finish();
    rusage self{};
    ::getrusage(RUSAGE_SELF, &self);
    std::printf("%s: writer %.3f core, ffmpeg %.3f core (at 25 frames a second)\n", splice ? "vmsplice" : "write",
                (bench::seconds(self) - bench::seconds(before)) * 25 / frames, ffmpeg_seconds * 25 / frames);
    return ffmpeg_seconds >= 0 ? 0 : 3;
}
