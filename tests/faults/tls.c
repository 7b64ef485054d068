#include "faults.h"
static void t(void) { CHECK(1); }
int main(void) { RUN(t); return th_finish(); }
