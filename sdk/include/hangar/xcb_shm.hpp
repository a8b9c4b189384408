// Reading the X screen through a MIT-SHM segment (and xcb replies that free themselves): the X server writes the pixels
// straight into memory this process shares with it, instead of sending 8 MB per 1080p frame down the socket.
// Header-only; a plugin that includes it links xcb and xcb-shm (pkg-config xcb xcb-shm).
#pragma once

#include <sys/ipc.h>
#include <sys/shm.h>
#include <xcb/shm.h>
#include <xcb/xcb.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace hangar::xcb {

// xcb hands out replies for the caller to free().
template <class T> using Reply = std::unique_ptr<T, decltype(&std::free)>;
template <class T> Reply<T> reply(T *r) {
    return Reply<T>(r, &std::free);
}

// One segment attached to one connection; it grows to the largest image asked for. Destroy it
// before the connection is closed.
class ShmImage {
public:
    explicit ShmImage(xcb_connection_t *conn) : conn_(conn) {}
    ShmImage(const ShmImage &) = delete;
    ShmImage &operator=(const ShmImage &) = delete;
    ~ShmImage() { release(); }

    // Whether the X server offers MIT-SHM at all.
    static bool available(xcb_connection_t *conn) {
        return reply(xcb_shm_query_version_reply(conn, xcb_shm_query_version(conn), nullptr)) != nullptr;
    }

    // The area of `drawable` as 32-bit pixels (B, G, R, X in memory), `width` * 4 bytes a row;
    // null when shared memory cannot be used here (another IPC namespace, a depth below 24):
    // the caller falls back to GetImage. The caller's to change until the next get().
    std::uint8_t *get(xcb_drawable_t drawable, int x, int y, int width, int height) {
        std::size_t bytes = static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 4;
        if (!ensure(bytes)) return nullptr;
        auto img = reply(xcb_shm_get_image_reply(
            conn_,
            xcb_shm_get_image(conn_, drawable, static_cast<std::int16_t>(x), static_cast<std::int16_t>(y),
                              static_cast<std::uint16_t>(width), static_cast<std::uint16_t>(height), ~0U,
                              XCB_IMAGE_FORMAT_Z_PIXMAP, seg_, 0),
            nullptr));
        if (!img || img->depth < 24) return nullptr;
        return static_cast<std::uint8_t *>(addr_);
    }

private:
    bool ensure(std::size_t bytes) {
        if (addr_ && size_ >= bytes) return true;
        release();
        int id = ::shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600);
        if (id < 0) return false;
        addr_ = ::shmat(id, nullptr, 0);
        ::shmctl(id, IPC_RMID, nullptr);             // gone once both sides detach
        if (addr_ == reinterpret_cast<void *>(-1)) { // NOLINT(performance-no-int-to-ptr): shmat's error value
            addr_ = nullptr;
            return false;
        }
        size_ = bytes;
        seg_ = xcb_generate_id(conn_);
        if (auto *err =
                xcb_request_check(conn_, xcb_shm_attach_checked(conn_, seg_, static_cast<std::uint32_t>(id), 0))) {
            std::free(err);
            release();
            return false;
        }
        return true;
    }

    void release() {
        if (!addr_) return;
        if (!xcb_connection_has_error(conn_)) xcb_shm_detach(conn_, seg_);
        ::shmdt(addr_);
        addr_ = nullptr;
        size_ = 0;
    }

    xcb_connection_t *conn_;
    void *addr_ = nullptr;
    std::size_t size_ = 0;
    xcb_shm_seg_t seg_ = 0;
};

} // namespace hangar::xcb
