/* data_tests.h — the data layer's test groups, run by test_data.c's main. */
#ifndef VIXEN_DATA_TESTS_H
#define VIXEN_DATA_TESTS_H
int run_dbn_tests(void);
int run_feature_tests(void);
int run_feature_ref_tests(void);
#endif
