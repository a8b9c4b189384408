// The unit test runner: every suite registered with CPPUNIT_TEST_SUITE_REGISTRATION.
//
//   hangar-unit-tests [-v] [TestName ...]
//
// With test names (a suite such as "RouterTest" or one test such as "RouterTest::testRest")
// only those run. -v prints each test's name and time. HANGAR_TEST_LOG=<level> shows the host's
// log lines (silent by default). The last line is always "N passed, M failed" for CI.
#include <cppunit/Test.h>
#include <cppunit/TestListener.h>
#include <cppunit/TestResult.h>
#include <cppunit/TestResultCollector.h>
#include <cppunit/extensions/TestFactoryRegistry.h>
#include <cppunit/ui/text/TestRunner.h>

#include <Poco/Logger.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace {

// -v: one line per test with its outcome and duration.
class Timing : public CppUnit::TestListener {
public:
    void startTest(CppUnit::Test *) override {
        failed_ = false;
        start_ = std::chrono::steady_clock::now();
    }
    void addFailure(const CppUnit::TestFailure &) override { failed_ = true; }
    void endTest(CppUnit::Test *test) override {
        auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start_).count();
        std::cout << (failed_ ? "FAIL " : "ok   ") << test->getName() << " (" << ms << " ms)" << std::endl;
    }

private:
    bool failed_ = false;
    std::chrono::steady_clock::time_point start_;
};

} // namespace

int main(int argc, char **argv) {
    // Like the real host: a write to a closed socket fails with EPIPE instead of killing us.
    std::signal(SIGPIPE, SIG_IGN);
    const char *level = std::getenv("HANGAR_TEST_LOG");
    Poco::Logger::root().setLevel(level && *level ? level : "none");
    Poco::Logger::setLevel("", Poco::Logger::parseLevel(level && *level ? level : "none"));

    bool verbose = false;
    std::vector<std::string> selected;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-v" || a == "--verbose")
            verbose = true;
        else
            selected.push_back(a);
    }
    if (selected.empty()) selected.emplace_back("");

    CppUnit::TextUi::TestRunner runner;
    runner.addTest(CppUnit::TestFactoryRegistry::getRegistry().makeTest());
    Timing progress;
    if (verbose) runner.eventManager().addListener(&progress);

    bool ok = true;
    for (const auto &path : selected) {
        try {
            ok = runner.run(path, false, true, !verbose) && ok;
        } catch (const std::invalid_argument &e) {
            std::cerr << "no such test: " << path << " (" << e.what() << ")\n";
            ok = false;
        }
    }
    const auto &result = runner.result();
    int run = result.runTests();
    int failed = result.testFailuresTotal();
    std::cout << (run - failed) << " passed, " << failed << " failed" << std::endl;
    return ok && failed == 0 && run > 0 ? 0 : 1;
}
