package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/promptgate/promptgate/proxy/policytest"
)

// JUnit XML, as CI systems read it (Jenkins, GitLab, GitHub actions): one testsuite per case file,
// one testcase per case; a failed expectation is a <failure>, a mistake of the case an <error>.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	File     string      `xml:"file,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure"`
	Error     *junitProblem `xml:"error"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// seconds is d in seconds, as JUnit's time attributes hold it.
func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// writeJUnit writes the results to path.
func writeJUnit(path string, results []*policytest.Result, took time.Duration) error {
	doc := junitSuites{Name: "promptgate test", Time: seconds(took)}
	at := map[string]int{}
	var suiteTime []time.Duration
	for _, r := range results {
		file, name, _ := strings.Cut(r.Case.Name, "/")
		i, ok := at[file]
		if !ok {
			i = len(doc.Suites)
			at[file] = i
			doc.Suites = append(doc.Suites, junitSuite{Name: file, File: r.Case.File})
			suiteTime = append(suiteTime, 0)
		}
		s := &doc.Suites[i]
		jc := junitCase{Name: name, Classname: file, File: r.Case.File, Time: seconds(r.Took), SystemOut: strings.Join(r.Details, "\n")}
		switch {
		case len(r.Problems) > 0:
			jc.Error = &junitProblem{Message: fmt.Sprintf("%d mistake(s) in the case", len(r.Problems)), Type: "case",
				Text: lines(append(slices.Clone(r.Problems), r.Failures...))}
			s.Errors++
			doc.Errors++
		case len(r.Failures) > 0:
			jc.Failure = &junitProblem{Message: fmt.Sprintf("%d expectation(s) not met", len(r.Failures)), Type: "expectation",
				Text: lines(r.Failures)}
			s.Failures++
			doc.Failures++
		}
		s.Tests++
		suiteTime[i] += r.Took
		s.Time = seconds(suiteTime[i])
		s.Cases = append(s.Cases, jc)
		doc.Tests++
	}
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("test: --junit: %w", err)
	}
	b = append([]byte(xml.Header), append(b, '\n')...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("test: --junit: %w", err)
	}
	return nil
}

// lines is the problems, one a line.
func lines(problems []policytest.Problem) string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = p.String()
	}
	return strings.Join(out, "\n")
}
