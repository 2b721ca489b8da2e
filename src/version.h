/* version.h -- delayq's version, as --version, INFO and the dashboard say it. */
#ifndef DQ_VERSION_H
#define DQ_VERSION_H

#define DELAYQ_VERSION "0.1.0"

#endif
