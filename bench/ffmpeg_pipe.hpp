// For the standalone replay benchmarks (replays_pipe.cpp, replays_encoders.cpp): an ffmpeg child
// reading raw frames on its standard input through a 1 MB pipe, as the recorder's ffmpeg reads
// the ScreenFeed, and the CPU time it took.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <vector>

namespace bench {

inline double seconds(const rusage &r) {
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

class FfmpegOnPipe {
public:
    // ffmpeg with `args` (argv[0] included, pipe:0 among them); `environment` ("K=V") added to its
    // environment when given.
    explicit FfmpegOnPipe(std::vector<const char *> args, const char *environment = nullptr) {
        int fds[2];
        if (::pipe(fds) != 0) return;
        ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
        args.push_back(nullptr);
        child_ = ::fork();
        if (child_ == 0) {
            ::dup2(fds[0], 0);
            ::close(fds[1]);
            if (environment) ::putenv(const_cast<char *>(environment));
            ::execvp(args[0], const_cast<char *const *>(args.data()));
            ::_exit(127);
        }
        ::close(fds[0]);
        in_ = fds[1];
    }
    FfmpegOnPipe(const FfmpegOnPipe &) = delete;
    FfmpegOnPipe &operator=(const FfmpegOnPipe &) = delete;
    ~FfmpegOnPipe() {
        if (in_ >= 0) finish();
    }

    // All of `data`, by reference (vmsplice) or copied (write); false when ffmpeg is gone.
    bool write(const void *data, std::size_t size, bool splice) {
        iovec iov{const_cast<void *>(data), size};
        while (iov.iov_len > 0) {
            const ssize_t n = splice ? ::vmsplice(in_, &iov, 1, 0) : ::write(in_, iov.iov_base, iov.iov_len);
            if (n <= 0) return false;
            iov.iov_base = static_cast<char *>(iov.iov_base) + n;
            iov.iov_len -= static_cast<std::size_t>(n);
        }
        return true;
    }

    // Closes ffmpeg's input and waits for it: its CPU seconds, or -1 when it did not succeed.
    double finish() {
        ::close(in_);
        in_ = -1;
        int status = 0;
        rusage usage{};
        if (child_ <= 0 || ::wait4(child_, &status, 0, &usage) != child_) return -1;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? seconds(usage) : -1;
    }

private:
    pid_t child_ = -1;
    int in_ = -1;
};

} // namespace bench
