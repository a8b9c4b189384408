// bench/replays_pipe: what handing 1080p I420 frames to ffmpeg costs, write() against vmsplice()
// with two buffers used by turns (how the replays plugin's ScreenFeed does it). 500 frames, each
// changed, into `ffmpeg -f rawvideo -i pipe:0 -f null -` through a 1 MB pipe; prints the CPU
// (utime+stime) of the writer and of ffmpeg as cores at 25 frames a second. Not part of
// `make bench` (no server involved):
//   g++ -O2 -o /tmp/replays_pipe bench/replays_pipe.cpp && /tmp/replays_pipe write && /tmp/replays_pipe splice
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

double seconds(const rusage &r) {
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

} // namespace

int main(int argc, char **argv) {
    const bool splice = argc > 1 && std::strcmp(argv[1], "splice") == 0;
    constexpr int frames = 500;
    constexpr std::size_t frame_size = 1920 * 1080 * 3 / 2;
    int fds[2];
    if (::pipe(fds) != 0) return 1;
    ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
    const pid_t child = ::fork();
    if (child == 0) {
        ::dup2(fds[0], 0);
        ::close(fds[1]);
        ::execlp("ffmpeg", "ffmpeg", "-v", "error", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-video_size", "1920x1080",
                 "-i", "pipe:0", "-f", "null", "-", nullptr);
        ::_exit(127);
    }
    ::close(fds[0]);
    std::vector<unsigned char> buffers(2 * frame_size);
    for (std::size_t i = 0; i < buffers.size(); ++i)
        buffers[i] = static_cast<unsigned char>(i * 7);
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    for (int f = 0; f < frames; ++f) {
        unsigned char *data = buffers.data() + (splice ? static_cast<std::size_t>(f % 2) * frame_size : 0);
        data[static_cast<std::size_t>(f) % frame_size] ^= 1; // a changed frame
        for (std::size_t left = frame_size; left > 0;) {
            iovec iov{data, left};
            const ssize_t n = splice ? ::vmsplice(fds[1], &iov, 1, 0) : ::write(fds[1], data, left);
            if (n <= 0) return 2;
            data += n;
            left -= static_cast<std::size_t>(n);
        }
    }
    ::close(fds[1]);
    int status = 0;
    ::waitpid(child, &status, 0);
    rusage self{}, ffmpeg{};
    ::getrusage(RUSAGE_SELF, &self);
    ::getrusage(RUSAGE_CHILDREN, &ffmpeg);
    std::printf("%s: writer %.3f core, ffmpeg %.3f core (at 25 frames a second)\n", splice ? "vmsplice" : "write",
                (seconds(self) - seconds(before)) * 25 / frames, seconds(ffmpeg) * 25 / frames);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}
