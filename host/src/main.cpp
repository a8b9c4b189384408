#include "app.hpp"

int main(int argc, char **argv) {
    return hangar::host::run_main(argc, argv);
}
